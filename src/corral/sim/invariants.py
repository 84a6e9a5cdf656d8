"""Checks of the simulator's bookkeeping, switched on by tests.

After every pass: no GPU is held by two jobs, the free-GPU records agree with
the allocations, and the job sets agree with the statuses. At the end: every
job that was not rejected finished exactly once, did exactly its work, never
started before it was submitted, and took at least its run time (JCT >= run
time); the GPU-seconds the cluster was busy equal the service the jobs got.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from corral.model.state import DONE, FAILED, PENDING, REJECTED, RUNNING, SchedulerState

if TYPE_CHECKING:
    from corral.sim.result import SimResult


class InvariantViolation(AssertionError):
    """The simulator broke one of its own rules."""


class InvariantChecker:
    def __init__(self, state: SchedulerState, any_size: bool = False) -> None:
        self.state = state
        self.any_size = any_size
        """The policy resizes jobs: a job may hold any number of GPUs."""
        self.finishes = np.zeros(len(state.submit), dtype=np.int64)

    def on_finish(self, i: int) -> None:
        self.finishes[i] += 1

    def after_pass(self) -> None:
        s = self.state
        running = sorted(s.running)
        if running != np.flatnonzero(s.status == RUNNING).tolist():
            raise InvariantViolation("running set disagrees with job statuses")
        pending = np.flatnonzero(s.status == PENDING).tolist()
        if (
            sorted(s.pending) != pending
            or s.pending_order != pending
            or s.pending_in_order().tolist() != pending
        ):
            raise InvariantViolation("pending set or queue order disagrees with job statuses")
        by_size = {k: v for k, v in s.pending_by_size.items() if v}
        expected: dict[int, list[int]] = {}
        for i in pending:
            expected.setdefault(int(s.gpus[i]), []).append(i)
        if by_size != expected:
            raise InvariantViolation("pending queues by size disagree with job statuses")
        held: list[int] = []
        for i in running:
            gpus = s.alloc[i]
            if (
                gpus is None
                or len(gpus) != s.held[i]
                or (len(gpus) % s.gpus[i] and not self.any_size)
            ):
                raise InvariantViolation(f"job {s.job_ids[i]} runs on {gpus}, asks {s.gpus[i]}")
            if s.seg_start[i] < s.submit[i]:
                raise InvariantViolation(f"job {s.job_ids[i]} started before it was submitted")
            host = s.host[i]
            if host >= 0:
                shared = s.alloc[host]
                if (
                    i not in s.guests.get(int(host), ())
                    or s.host[host] >= 0
                    or shared is None
                    or not set(gpus) <= set(shared)
                    or s.status[host] != RUNNING
                ):
                    raise InvariantViolation(f"job {s.job_ids[i]} is packed on a job not there")
                continue
            held.extend(gpus)
        if len(held) != len(set(held)):
            raise InvariantViolation("a GPU is given to two jobs")
        for host, guests in s.guests.items():
            if (
                not guests
                or s.guest[host] != guests[0]
                or s.guest_count[host] != len(guests)
                or (s.host[guests] != host).any()
            ):
                raise InvariantViolation(f"job {s.job_ids[host]}'s list of guests disagrees")
        if int(s.guest_count.sum()) != sum(map(len, s.guests.values())):
            raise InvariantViolation("guest counts disagree with the lists of guests")
        busy = np.zeros(s.cluster.total_gpus, dtype=bool)
        busy[held] = True
        if not np.array_equal(busy, ~s.free.mask):
            raise InvariantViolation("free-GPU mask disagrees with allocations")
        if s.busy_gpus != len(held) or s.free.total != s.cluster.total_gpus - len(held):
            raise InvariantViolation("busy/free GPU counts disagree with allocations")
        if not s.free.indexes_agree():
            raise InvariantViolation("per-node free counts or indexes disagree with the free mask")

    def at_end(self, result: SimResult) -> None:
        s = self.state
        if result.end_time < result.config.max_time:
            ended = (s.status == DONE) | (s.status == REJECTED) | (s.status == FAILED)
            unfinished = np.flatnonzero(~ended)
            if len(unfinished):
                raise InvariantViolation(f"{len(unfinished)} jobs never finished")
        done = s.status == DONE
        if (self.finishes[done] != 1).any() or (self.finishes[~done] != 0).any():
            raise InvariantViolation("a job finished more or less than once")
        tol = 1e-6
        if not np.allclose(s.steps_done[done], s.total_steps[done], rtol=1e-6, atol=1e-6):
            raise InvariantViolation("a finished job did not do exactly its work")
        jct = s.finish_time[done] - s.submit[done]
        # a job grown onto more GPUs than it asked for may beat its nominal run time,
        # but never its run time at the fastest speed it was given
        run_time = s.total_steps[done] / (s.ref_speed[done] * s.max_speedup[done])
        if (jct < run_time - tol * np.maximum(run_time, 1.0)).any():
            raise InvariantViolation("a job finished faster than its run time")
        if (s.first_start[done] < s.submit[done]).any():
            raise InvariantViolation("a job started before it was submitted")
        service = float(s.attained_base.sum()) - s.shared_gpu_seconds
        # a run cut short by max_time leaves jobs mid-segment: count their open service
        for i in s.running:
            if s.host[i] < 0:
                service += s.held[i] * (result.end_time - s.seg_start[i])
        if not np.isclose(service, result.busy_gpu_seconds, rtol=1e-9, atol=1e-3):
            raise InvariantViolation(
                f"GPU-seconds busy ({result.busy_gpu_seconds}) != service given "
                f"on unshared GPUs ({service})"
            )
