"""The policy's view of a live cluster: a SchedulerState kept in step with the store.

Policies read a :class:`~corral.model.state.SchedulerState` whose jobs are
dense indices. The live service gives each job a slot when it first sees it
(submission or recovery) and keeps the slot for the job's life, so policies
that remember things per job index (Tiresias' queues, Gavel's received
service) work unchanged. Slots are allocated in blocks; when they run out,
the state is rebuilt with the live jobs only (the scheduler then starts a
fresh policy instance, exactly as after a restart).

Jobs that must not be scheduled for now (suspended, in retry back-off) are
*held*: they are in no queue, and come back with :meth:`LiveJobs.arrive`.
Time in the state is seconds since the store's epoch.
"""

from __future__ import annotations

import numpy as np

from corral.model.cluster import Cluster
from corral.model.jobs import JobTable
from corral.model.state import FUTURE, PENDING, REJECTED, RUNNING, SchedulerState

MIN_CAPACITY = 256
DEFAULT_VC = "default"
"""The virtual cluster of a job whose spec names none."""


class LiveJobs:
    def __init__(self, cluster: Cluster, capacity: int = MIN_CAPACITY) -> None:
        self.cluster = cluster
        self.capacity = max(int(capacity), 1)
        placeholders = JobTable.from_records(
            [
                {"job_id": f"_{k}", "submit_time": 0.0, "num_gpus": 1, "total_steps": np.inf}
                for k in range(self.capacity)
            ],
            source="live",
        )
        self.state = SchedulerState(cluster, placeholders)
        st = self.state
        st.known_in_advance = False
        st.measures_speed = True
        for name in (
            "submit",
            "gpus",
            "total_steps",
            "duration",
            "weight",
            "ref_speed",
            "batch_size",
        ):
            setattr(st, name, getattr(st, name).copy())  # the table's columns are read-only
        self.index: dict[int, int] = {}
        """Store job id -> slot."""
        self.ids: list[int] = []
        """Slot -> store job id."""

    @property
    def full(self) -> bool:
        return len(self.ids) >= self.capacity

    def add(
        self,
        job_id: int,
        submit: float,
        gpus: int,
        priority: int = 0,
        weight: float = 1.0,
        job_type: str = "generic",
        gpu_type: str | None = None,
        duration: float = np.inf,
        estimated: bool = False,
        vc: str = DEFAULT_VC,
        user: str = "",
        model: str = "",
        batch_size: int = 0,
        nodes: int = 0,
    ) -> int:
        """Give a job a slot (held: call :meth:`arrive` to queue it).

        ``duration`` is the expected run time in seconds; live jobs run at one
        step per second in the state, so it is also their total steps and
        policies that rank by work left read it as they do in the simulator.
        ``estimated`` says it is a stand-in, not the owner's figure.
        """
        if self.full:
            raise OverflowError("no free slot; rebuild with a larger capacity")
        i = len(self.ids)
        self.ids.append(job_id)
        self.index[job_id] = i
        st = self.state
        st.job_ids[i] = str(job_id)
        st.submit[i] = submit
        st.gpus[i] = gpus
        st.weight[i] = weight
        st.duration[i] = duration
        st.total_steps[i] = duration
        st.ref_speed[i] = 1.0
        st.estimated[i] = estimated
        st.vc[i] = vc
        st.user[i] = user
        st.job_type[i] = job_type
        st.model[i] = model
        st.batch_size[i] = batch_size
        st.checkpoints[i] = False  # until it reports a checkpoint (see model.unsaved_work)
        st.all_checkpoint = False
        st.lost_run[i] = st.lost_run_before[i] = st.unsaved_steps[i] = 0.0
        st.noise_scale[i] = np.nan
        st.step_time[i] = np.nan
        st.type_req[i] = (
            st.cluster.gpu_type_names.index(gpu_type)
            if gpu_type in st.cluster.gpu_type_names
            else -1
        )
        st.nodes_req[i] = nodes
        st._type_speed = None
        self.set_priority(i, priority)
        return i

    def set_priority(self, i: int, priority: int) -> None:
        self.state.priority[i] = priority
        if priority:
            self.state.tiered = True

    def arrive(self, i: int, now: float) -> None:
        self.state.now = now
        self.state.arrive(i)

    def start(
        self, i: int, gpus: tuple[int, ...], since: float | None = None, host: int = -1
    ) -> None:
        """A pending job starts on ``gpus`` (``since``: when it really began, on
        adoption; ``host``: the running job whose GPUs it shares, when packed)."""
        st = self.state
        st.start(i, gpus, speed=1.0, overhead=0.0, host=host)
        if since is not None:
            st.seg_start[i] = since
            st.progress_start[i] = since

    def progress_from(self, i: int, t: float) -> None:
        """A running job makes progress from ``t`` (no earlier than it does already):
        the time before is its switch-in, not counted toward a minimum run."""
        st = self.state
        st.progress_start[i] = max(st.progress_start[i], t)
        st.seg_overhead[i] = st.progress_start[i] - st.seg_start[i]

    def preempt(self, i: int) -> None:
        self.state.preempt(i)

    def requeue(self, i: int, gpus: int) -> None:
        """A running job goes back to the queue without counting a preemption
        (its pre-run passed; it now asks for its full gang)."""
        st = self.state
        st.preempt(i)
        st.preemptions[i] -= 1
        st.resize(i, gpus)

    def hold(self, i: int) -> None:
        """Take a job out of the queues (running: its GPUs are released)."""
        st = self.state
        if st.status[i] == RUNNING:
            st.preempt(i)
        if st.status[i] == PENDING:
            st.dequeue(i)
        st.status[i] = FUTURE

    def close(self, i: int) -> None:
        """The job is over for the scheduler (finished, failed, cancelled)."""
        st = self.state
        if st.status[i] == RUNNING:
            st.finish(i)
        else:
            self.hold(i)
            st.status[i] = REJECTED

    def slot(self, job_id: int) -> int | None:
        return self.index.get(job_id)
