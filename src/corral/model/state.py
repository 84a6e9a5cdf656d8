"""The scheduler's view of the world: what every policy reads.

:class:`SchedulerState` holds the jobs as columns (numpy arrays indexed by a
dense job index) because policies rank hundreds to thousands of jobs at every
event and must do it vectorised. It also keeps the sets of pending and running
jobs, each job's allocation and the free GPUs. The simulator mutates it as
events happen; the live service keeps one in step with its store. Policies
only read it and answer with a :class:`~corral.model.plan.Plan`.

Progress is accounted lazily: a running job records when its current run
segment began, when it started making progress (after the switch overhead)
and its speed, so the state never has to touch every running job per event.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from corral.model.cluster import Cluster
from corral.model.free_gpus import FreeGPUs
from corral.model.jobs import JobTable

if TYPE_CHECKING:
    from corral.perf.speeds import SpeedModel

FUTURE, PENDING, RUNNING, DONE, REJECTED, FAILED = 0, 1, 2, 3, 4, 5
STATUS_NAMES = ("FUTURE", "PENDING", "RUNNING", "DONE", "REJECTED", "FAILED")


class IndexSet:
    """A set of job indices: O(1) add and remove, and an (unordered) numpy view."""

    __slots__ = ("_items", "_n", "_pos")

    def __init__(self, capacity: int) -> None:
        self._items = np.empty(capacity, dtype=np.int64)
        self._pos = np.full(capacity, -1, dtype=np.int64)
        self._n = 0

    def add(self, i: int) -> None:
        self._items[self._n] = i
        self._pos[i] = self._n
        self._n += 1

    def remove(self, i: int) -> None:
        items, pos = self._items, self._pos
        p = int(pos[i])
        n = self._n - 1
        last = int(items[n])
        items[p] = last
        pos[last] = p
        pos[i] = -1
        self._n = n

    def array(self) -> np.ndarray:
        """The members (a copy: safe to keep while the set changes)."""
        return self._items[: self._n].copy()

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int | np.integer) and self._pos[i] >= 0

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        return iter(self._items[: self._n].tolist())


class SchedulerState:
    """Jobs, GPUs and time as a policy sees them."""

    def __init__(self, cluster: Cluster, jobs: JobTable, speeds: SpeedModel | None = None) -> None:
        df = jobs.df
        n = len(df)
        self.cluster = cluster
        self.jobs = jobs
        self.now = 0.0
        self.job_ids: list[str] = df["job_id"].tolist()
        self.submit = df["submit_time"].to_numpy(dtype=np.float64)
        self.gpus = df["num_gpus"].to_numpy(dtype=np.int64)
        self.total_steps = df["total_steps"].to_numpy(dtype=np.float64)
        self.duration = df["duration"].to_numpy(dtype=np.float64)
        self.weight = df["weight"].to_numpy(dtype=np.float64)
        self.checkpoints = df["checkpoints"].to_numpy(dtype=bool).copy()
        """False: a preempted job loses its work (see :mod:`corral.model.unsaved_work`)."""
        self.all_checkpoint = bool(self.checkpoints.all())
        self.one_type = len(cluster.gpu_type_names) == 1
        """A cluster of one GPU type: every job runs on every GPU (placement's fast path)."""
        """True while every job checkpoints (the rule of unsaved work has nothing to do;
        a trace's jobs all do unless it says otherwise)."""
        self.lost_run = np.zeros(n, dtype=np.float64)
        """Longest run (seconds progressing) a preemption threw away, per job."""
        self.lost_run_before = np.zeros(n, dtype=np.float64)
        """``lost_run`` before the job's last preemption (see :meth:`saved_on_stop`)."""
        self.unsaved_steps = np.zeros(n, dtype=np.float64)
        """Progress the job's last preemption threw away (see :meth:`saved_on_stop`)."""
        self.model: list[str] = df["model"].tolist()
        self.job_type: list[str] = df["job_type"].tolist()
        self.batch_size = df["batch_size"].to_numpy(dtype=np.int64)
        """Global batch size where the trace gives it (0: unknown)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ref = self.total_steps / self.duration
        self.ref_speed = np.where(np.isfinite(ref) & (ref > 0), ref, 1.0)
        """Steps per second on the job's reference allocation (1 for generic jobs)."""
        self.estimated = np.zeros(n, dtype=bool)
        """True where the duration is a stand-in estimate (live jobs that gave none)."""
        self.gpu_memory = np.full(n, np.nan)
        """Peak GPU memory per GPU (GB) a live job's heartbeats report (NaN: none)."""
        self._footprints: np.ndarray | None = None
        self.noise_scale = np.full(n, np.nan)
        """Gradient noise scale a live job reports (NaN: none); goodput policies read it."""
        self.step_time = np.full(n, np.nan)
        """Seconds per step a live job's heartbeats report on the GPUs it holds now
        (NaN: none yet); Pollux learns each job's scaling from it."""
        self.curve_predicted = np.zeros(n, dtype=bool)
        """True where the work is predicted from the job's own loss curve (live jobs
        with a target loss; Optimus reads it)."""
        self.known_in_advance = True
        """Every job, with its size of work, is known up front (a trace); the live
        service sets False: jobs appear as they are submitted."""
        self.vc: list[str] = df["vc"].fillna("").astype(str).tolist()
        """Virtual cluster (queue, account) of each job."""
        self.user: list[str] = df["user"].fillna("").astype(str).tolist()
        """Owner of each job (estimators learn from an owner's past jobs)."""
        self.speeds = speeds
        self._type_speed: np.ndarray | None = None
        self._everywhere: np.ndarray = np.ones(0, dtype=bool)
        """Per job: it runs on every GPU type (kept with ``type_speed``)."""
        self.status = np.zeros(n, dtype=np.int8)
        self.steps_done = np.zeros(n, dtype=np.float64)
        self.attained_base = np.zeros(n, dtype=np.float64)
        self.seg_start = np.zeros(n, dtype=np.float64)
        self.progress_start = np.zeros(n, dtype=np.float64)
        self.seg_overhead = np.zeros(n, dtype=np.float64)
        """Switch overhead charged at the start of the current segment (no progress)."""
        self.speed = np.zeros(n, dtype=np.float64)
        self.base_speed = np.zeros(n, dtype=np.float64)
        """Speed of the current run without packing interference."""
        self.max_speedup = np.ones(n, dtype=np.float64)
        """Fastest this job ever ran relative to its reference speed (> 1 when grown)."""
        self.held = np.zeros(n, dtype=np.int64)
        """GPUs the running job holds (more than it asked for when grown)."""
        self.host = np.full(n, -1, dtype=np.int64)
        """For a packed guest: the running job whose GPUs it shares."""
        self.guest = np.full(n, -1, dtype=np.int64)
        """For a host: the first job packed onto its GPUs (-1: none), for the
        vectorised question "is this job's GPU set shared?"."""
        self.guests: dict[int, list[int]] = {}
        """For a host with guests: all of them, in the order they joined. A packed
        pair has one; a time-sliced group (Gandiva) may have any number."""
        self.guest_count = np.zeros(n, dtype=np.int64)
        """For a host: how many guests share its GPUs (``len(guests[host])``), so
        that a policy can find the least loaded GPU set without a loop."""
        self.shared_gpu_seconds = 0.0
        """Service given to guests on GPUs their hosts already count as busy."""
        self.observed_speed = np.full(n, np.nan)
        """Live only: a running job's speed measured from its heartbeats while it
        shares its GPUs, relative to its speed measured alone (NaN where not
        measured). The simulator's speeds come from its model, so it leaves
        these NaN; a policy that judges sharing (Gandiva) prefers them."""
        self.reports_speed = np.zeros(n, dtype=bool)
        """Live only: the job reports its throughput in heartbeats."""
        self.measures_speed = False
        """True when the engine measures speeds (the live service); policies may
        then try sharing that no model vouches for and judge it by measurement."""
        self.queued_since = np.zeros(n, dtype=np.float64)
        self.first_start = np.full(n, np.nan)
        self.finish_time = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.failures = np.zeros(n, dtype=np.int64)
        """Failed attempts (each lost the progress made since the attempt started)."""
        self.attempt_steps = np.zeros(n, dtype=np.float64)
        self.overhead = np.zeros(n, dtype=np.float64)
        self.alloc: list[tuple[int, ...] | None] = [None] * n
        self.pending = IndexSet(n)
        self.running = IndexSet(n)
        self.pending_order: list[int] = []
        """Pending jobs in submit order (index order is submit order)."""
        self.queue_changes = 0
        """Counts every job put in or taken out of the pending set: a policy that
        saw the same count at its last pass knows the same jobs wait."""
        self._in_order = np.zeros(0, dtype=np.int64)
        self._in_order_at = 0
        self.pending_by_size: dict[int, list[int]] = {}
        """Pending jobs of each gang size, in submit order: policies that match
        waiting jobs by size read the head of a size's queue without scanning a
        backlog of tens of thousands."""
        self.free = FreeGPUs(cluster)
        self.busy_gpus = 0
        self.finished: list[int] = []
        """Jobs in the order they finished (policies that learn from history read it)."""
        self.priority = df["priority"].to_numpy(dtype=np.int64).copy()
        """User priority: a higher tier runs first whatever the policy's key (0 in traces)."""
        self.tiered = bool(self.priority.any())
        """True once any job has a non-zero priority (lets FIFO skip sorting when none has)."""
        self.type_req = np.full(n, -1, dtype=np.int64)
        """GPU type a job must run on (index into ``cluster.gpu_type_names``; -1: any)."""
        self.nodes_req = np.zeros(n, dtype=np.int64)
        """Nodes a job's gang must span exactly, the same number of GPUs on each
        (Slurm's ``--nodes`` with ``--gpus-per-node``; 0: any layout). Placement
        honours it over the strategy's own choice (see PlacementStrategy.choose_for)."""

    # ----------------------------------------------------------- reading
    @property
    def type_speed(self) -> np.ndarray:
        """jobs x ``cluster.gpu_type_names``: steps/s of each job's gang on one
        server of each GPU type (computed once, on first use)."""
        if self._type_speed is None:
            speeds = self.speed_model().type_speeds(
                self.job_type, self.gpus, self.ref_speed, self.cluster
            )
            bound = self.type_req >= 0
            if bound.any():  # a job bound to one type runs nowhere else
                other = np.arange(speeds.shape[1])[None, :] != self.type_req[:, None]
                speeds[bound[:, None] & other] = 0.0
            self._type_speed = speeds
            self._everywhere = np.asarray((speeds > 0).all(axis=1))
        return self._type_speed

    def speed_model(self) -> SpeedModel:
        """The speed model (the default one, made on first use, when none was given)."""
        if self.speeds is None:
            from corral.perf.speeds import SpeedModel

            self.speeds = SpeedModel()
        return self.speeds

    def runs_on(self, i: int) -> np.ndarray | None:
        """The GPU types job ``i`` can run on (a boolean per type), or None when it runs
        on every type. A job bound to a type runs there only; a job whose measured
        speed on a type is 0 (its gang does not fit in that GPU's memory, as Gavel
        measured ResNet-50 at batch 128 on a K80) never runs there."""
        if self.one_type:
            return None
        speeds = self.type_speed  # (a job bound to a type has speed 0 elsewhere)
        if self._everywhere[i]:
            return None
        out: np.ndarray | None = speeds[i] > 0
        return out

    def runs_at(self, i: int, gpus: tuple[int, ...] | list[int]) -> bool:
        """Whether job ``i`` makes progress on exactly ``gpus`` (its measured speed there
        is not 0: a gang of another size may not fit a type its own size fits)."""
        if self.one_type:
            return True
        speed = self.speed_model().gang_speed(
            self.cluster, gpus, self.job_type[i], self.model[i], float(self.ref_speed[i])
        )
        return speed > 0

    def measured_memory(self, idx: np.ndarray) -> np.ndarray:
        """Peak GPU memory per GPU (GB) each job was seen to use (NaN: unknown).

        Live, what its heartbeats reported; in a simulation, the footprint of its
        job type (:func:`corral.perf.memory.footprint_gb`), as a heartbeat would
        have reported it: only measured job types have one.
        """
        if not self.known_in_advance:
            out: np.ndarray = self.gpu_memory[idx]
            return out
        if self._footprints is None:
            from corral.perf.memory import footprint_gb

            by_type = {t: footprint_gb(t) or np.nan for t in set(self.job_type)}
            self._footprints = np.array([by_type[t] for t in self.job_type], dtype=np.float64)
        footprints: np.ndarray = self._footprints[idx]
        return footprints

    def attained(self, idx: np.ndarray) -> np.ndarray:
        """2D attained service (GPU-seconds held so far) of the given jobs, now."""
        # ``held`` is 0 for every job not running, so no status test is needed
        held_for = self.held[idx] * (self.now - self.seg_start[idx])
        out: np.ndarray = self.attained_base[idx] + held_for
        return out

    def done_steps(self, idx: np.ndarray) -> np.ndarray:
        run = self.status[idx] == RUNNING
        live = np.maximum(self.now - self.progress_start[idx], 0.0) * self.speed[idx]
        out: np.ndarray = self.steps_done[idx] + np.where(run, live, 0.0)
        return out

    def remaining_time(self, idx: np.ndarray) -> np.ndarray:
        """Oracle: seconds of work left at the reference speed (SRTF knows this)."""
        left = np.maximum(self.total_steps[idx] - self.done_steps(idx), 0.0)
        out: np.ndarray = left / self.ref_speed[idx]
        return out

    def progressing_for(self, idx: np.ndarray) -> np.ndarray:
        """Seconds each (running) job has run since it last started, its switch-in
        overhead not counted: a minimum-run quantum or a turn counts these, else a
        switch cost as long as the quantum lets jobs take the GPUs from each other
        before any of them progresses, and the run never ends."""
        out: np.ndarray = self.now - self.seg_start[idx] - self.seg_overhead[idx]
        return out

    def pending_in_order(self) -> np.ndarray:
        """The pending jobs in submit order, as a read-only array.

        Kept between calls: jobs that left the queue are dropped with one
        vectorised test and arrivals (the newest jobs) appended, so a backlog of
        tens of thousands is not sorted again at every event; anything else (a
        preempted job rejoining) rebuilds it from :attr:`pending_order`.
        """
        if self._in_order_at == self.queue_changes:
            return self._in_order
        order = self.pending_order
        kept = self._in_order
        if len(kept):
            kept = kept[self.status[kept] == PENDING]
        last = int(kept[-1]) if len(kept) else -1
        tail = bisect.bisect_right(order, last)
        if tail == len(kept):  # every job not kept is newer than the ones kept
            kept = np.concatenate((kept, np.array(order[tail:], dtype=np.int64)))
        else:
            kept = np.array(order, dtype=np.int64)
        kept.flags.writeable = False
        self._in_order, self._in_order_at = kept, self.queue_changes
        return kept

    def allocations(self) -> dict[int, tuple[int, ...]]:
        return {i: self.alloc[i] for i in self.running}  # type: ignore[misc]

    # ---------------------------------------------------------- mutating
    def arrive(self, i: int) -> None:
        self.status[i] = PENDING
        self.queued_since[i] = self.now
        self._enqueue(i)

    def _enqueue(self, i: int) -> None:
        """Put job ``i`` in the pending set and its ordered queues."""
        self.queue_changes += 1
        self.pending.add(i)
        bisect.insort(self.pending_order, i)
        size = int(self.gpus[i])
        same = self.pending_by_size.get(size)
        if same is None:
            self.pending_by_size[size] = [i]
        else:
            bisect.insort(same, i)

    def set_aside(self, i: int) -> None:
        """Hide pending job ``i`` from the policy (status FUTURE) without forgetting
        when it was queued; :meth:`put_back` undoes it."""
        self.dequeue(i)
        self.status[i] = FUTURE

    def put_back(self, i: int) -> None:
        """Undo :meth:`set_aside`: the job waits again, queued since when it was."""
        self.status[i] = PENDING
        self._enqueue(i)

    def dequeue(self, i: int) -> None:
        """Take pending job ``i`` out of the pending set and its ordered queues
        (its status is the caller's to set)."""
        self.queue_changes += 1
        self.pending.remove(i)
        order = self.pending_order
        del order[bisect.bisect_left(order, i)]
        same = self.pending_by_size[int(self.gpus[i])]
        del same[bisect.bisect_left(same, i)]

    def resize(self, i: int, gpus: int) -> None:
        """Change the gang size job ``i`` asks for (live: a pre-run passed)."""
        queued = self.status[i] == PENDING
        if queued:
            self.dequeue(i)
        self.gpus[i] = gpus
        self._type_speed = None
        if queued:
            self._enqueue(i)

    def reject(self, i: int) -> None:
        self.status[i] = REJECTED

    def start(
        self,
        i: int,
        gpus: tuple[int, ...],
        speed: float,
        overhead: float,
        take: bool = True,
        host: int = -1,
    ) -> float:
        """Start a pending job; returns the time it will finish if left alone.

        ``take=False`` when the caller will install free-GPU records that
        already account for this start (a plan's ``free_after``). ``host``
        packs the job onto a running job's GPUs (no GPUs are taken).
        """
        # The simulator's hottest path (once per start): plain scalar reads and
        # writes, no numpy calls.
        n = len(gpus)
        if host >= 0:
            if self.host[host] >= 0:
                raise ValueError("a job can only share the GPUs of a job that holds them")
            self.host[i] = host
            self.guests.setdefault(host, []).append(i)
            self.guest_count[host] += 1
            if self.guest[host] < 0:
                self.guest[host] = i
        else:
            if take:
                self.free.take(gpus)
            self.busy_gpus += n
        self.dequeue(i)
        self.running.add(i)
        self.status[i] = RUNNING
        self.alloc[i] = gpus
        now = self.now
        done = float(self.steps_done[i])
        self.attempt_steps[i] = done
        self.seg_start[i] = now
        self.progress_start[i] = now + overhead
        self.seg_overhead[i] = overhead
        self.speed[i] = speed
        self.base_speed[i] = speed
        speedup = speed / float(self.ref_speed[i])
        if speedup > self.max_speedup[i]:
            self.max_speedup[i] = speedup
        self.held[i] = n
        if overhead:
            self.overhead[i] += overhead
        first = self.first_start
        if first[i] != first[i]:  # NaN: its first start
            first[i] = now
        return now + overhead + (float(self.total_steps[i]) - done) / speed

    def respeed(self, i: int, speed: float) -> float:
        """Change a running job's speed from now on; returns its new finish time."""
        now = self.now
        if now > self.progress_start[i]:
            self.steps_done[i] += (now - self.progress_start[i]) * self.speed[i]
            self.progress_start[i] = now
        self.speed[i] = speed
        speedup = speed / float(self.ref_speed[i])
        if speedup > self.max_speedup[i]:
            self.max_speedup[i] = speedup
        left = max(self.total_steps[i] - self.steps_done[i], 0.0)
        out: float = self.progress_start[i] + left / speed
        return out

    def respeed_many(self, ids: np.ndarray, speeds: np.ndarray) -> None:
        """:meth:`respeed` for distinct jobs ``ids`` at once (the same arithmetic)."""
        now = self.now
        start = self.progress_start[ids]
        # (a job still paying its switch cost, start > now, has made no progress)
        self.steps_done[ids] += np.maximum(now - start, 0.0) * self.speed[ids]
        self.progress_start[ids] = np.maximum(start, now)
        self.speed[ids] = speeds
        self.max_speedup[ids] = np.maximum(self.max_speedup[ids], speeds / self.ref_speed[ids])

    def _close_segment(self, i: int, release: bool = True) -> None:
        now = self.now
        gpus = self.alloc[i]
        assert gpus is not None
        service = len(gpus) * (now - float(self.seg_start[i]))
        host = int(self.host[i])
        guest = int(self.guest[i])
        if host >= 0:
            self._unlink(host, i)
            self.shared_gpu_seconds += service
        elif guest >= 0:
            self._hand_over(i, guest)
            kept = self.alloc[guest]
            if kept is not None and len(kept) < len(gpus):  # a smaller guest keeps its own
                extra = [g for g in gpus if g not in kept]
                if release:
                    self.free.release(extra)
                self.busy_gpus -= len(extra)
        else:
            if release:
                self.free.release(gpus)
            self.busy_gpus -= len(gpus)
        self.running.remove(i)
        self.attained_base[i] += service
        ran = now - float(self.progress_start[i])
        if ran > 0.0:
            self.steps_done[i] += ran * float(self.speed[i])
        self.alloc[i] = None
        self.held[i] = 0

    def _unlink(self, host: int, guest: int) -> None:
        """``guest`` no longer shares ``host``'s GPUs."""
        self.host[guest] = -1
        rest = self.guests[host]
        rest.remove(guest)
        self.guest_count[host] -= 1
        if rest:
            self.guest[host] = rest[0]
        else:
            del self.guests[host]
            self.guest[host] = -1

    def _hand_over(self, host: int, guest: int) -> None:
        """A host leaves while jobs are packed on it: its first guest keeps running
        and takes its GPUs over (as in Gandiva, where the job left on a GPU simply
        continues; a guest on some of the host's GPUs keeps those), and any other
        guests share them with it from now on. Its service so far was given on
        GPUs its host counted as busy; from now on the GPUs are busy on its
        account."""
        now = self.now
        gpus = self.alloc[guest]
        assert gpus is not None
        service = len(gpus) * (now - self.seg_start[guest])
        self.attained_base[guest] += service
        self.shared_gpu_seconds += service
        self.seg_start[guest] = now
        self._unlink(host, guest)
        others = self.guests.pop(host, [])
        self.guest[host] = -1
        self.guest_count[host] = 0
        if others:
            self.host[others] = guest
            self.guests[guest] = others
            self.guest[guest] = others[0]
            self.guest_count[guest] = len(others)

    def sharing_group(self, i: int) -> list[int]:
        """The running jobs on job ``i``'s GPU set: its holder first, then the
        guests in the order they joined (just ``[i]`` when it shares with none)."""
        host = int(self.host[i])
        holder = i if host < 0 else host
        return [holder, *self.guests.get(holder, ())]

    def preempt(self, i: int, release: bool = True) -> None:
        if not self.checkpoints[i]:  # it starts again from scratch: its run is lost
            ran = self.now - float(self.progress_start[i])
            self.lost_run_before[i] = self.lost_run[i]
            if ran > self.lost_run[i]:
                self.lost_run[i] = ran
            self._close_segment(i, release)
            self.unsaved_steps[i] = self.steps_done[i] - self.attempt_steps[i]
            self.steps_done[i] = self.attempt_steps[i]
        else:
            self._close_segment(i, release)
        self.status[i] = PENDING
        self.preemptions[i] += 1
        self.queued_since[i] = self.now
        self._enqueue(i)

    def saved_on_stop(self, i: int) -> None:
        """Job ``i``, preempted while not known to checkpoint, saved its progress as
        it stopped after all (live: its process left with the exit code of a
        checkpointed stop). That preemption threw nothing away, and later ones
        will not: its progress and its longest lost run are as they were."""
        if self.checkpoints[i]:
            return
        self.checkpoints[i] = True
        self.steps_done[i] += self.unsaved_steps[i]
        self.unsaved_steps[i] = 0.0
        self.lost_run[i] = self.lost_run_before[i]

    def fail(self, i: int, final: bool) -> None:
        """The running attempt of job ``i`` failed: its progress since it started is lost.

        The job goes back to the queue for a retry, or ends as FAILED when
        ``final`` (its retries are used up).
        """
        self._close_segment(i)
        self.steps_done[i] = self.attempt_steps[i]
        self.failures[i] += 1
        if final:
            self.status[i] = FAILED
            return
        self.status[i] = PENDING
        self.queued_since[i] = self.now
        self._enqueue(i)

    def finish(self, i: int) -> None:
        self._close_segment(i)
        self.status[i] = DONE
        self.finish_time[i] = self.now
        self.finished.append(i)
