"""The loop's watch on the GPUs themselves, from what the driver reports
(:mod:`corral.runtime.execution.gpu_driver`).

Every ``gpu_poll`` seconds:

* **health**: a GPU the driver reports failed (an uncorrected ECC error, a
  critical Xid, its slowdown temperature, lost from the bus) drains its node
  with the driver's words as the reason, as Slurm drains a node whose health
  check fails; the job running on it is stopped at once and its attempt ends
  as a ``node_failure`` (the Philly study's infrastructure failures, retried
  elsewhere), its detail naming the GPU and the fault. The node stays drained
  until an admin resumes it (``corral resume NODE``); a GPU still failing then
  drains it again.
* **usage**: each running job's GPU utilisation (the mean over its GPUs) and
  the GPU memory its processes hold are stored with its heartbeat figures
  (``gpu_utilization``, ``gpu_memory_gb`` in ``corral show``, the dashboard
  and ``/v1/jobs/ID``), and the memory per GPU goes into the policy's state
  where the job's heartbeats did not say it (what AntMan's sharing reads).
"""

from __future__ import annotations

import os
from types import MappingProxyType

import numpy as np
from sqlalchemy import select

from corral.runtime.loop.loop_base import LoopState
from corral.runtime.loop.stops import Stops
from corral.runtime.storage.store import JobRow, NodeRow

GPU_FAILURE = "gpu_failure"
"""The stop an attempt on a failed GPU is given (:data:`corral.runtime.execution.exits.STOPS`)."""


class GpuWatch:
    """Health and usage of the GPUs, from the driver."""

    def __init__(self, loop: LoopState, stops: Stops) -> None:
        self.loop = loop
        self.stops = stops

    def watch_gpus(self, now: float) -> bool:
        """Poll the driver when due; True when a GPU failed (the loop re-plans)."""
        interval = self.loop.config.gpu_poll
        if interval <= 0 or now - self.loop.gpus_polled_at < interval:
            return False
        self.loop.gpus_polled_at = now
        failed = self._check_health(now)
        self._record_usage()
        return failed

    def _check_health(self, now: float) -> bool:
        faults = self.loop.executor.gpu_faults()
        if not faults and not self.loop.failed_gpus:
            return False  # (virtual GPUs, or healthy ones: no store read)
        with self.loop.store.session() as s:
            states = {r.name: r.state for r in s.scalars(select(NodeRow))}
        # a failed GPU whose node an admin resumed: its driver record is cleared, and
        # a fault it still has drains it again below
        for gpu in [
            g for g in self.loop.failed_gpus if states.get(self.loop.slots[g].node) == "up"
        ]:
            del self.loop.failed_gpus[gpu]
            self.loop.executor.gpu_resumed([gpu])
        new = {g: why for g, why in faults.items() if g not in self.loop.failed_gpus}
        if not new:
            return False
        with self.loop.store.session() as s:
            for gpu, why in sorted(new.items()):
                slot = self.loop.slots[gpu]
                reason = f"GPU {slot.device if slot.device is not None else gpu}: {why}"
                self.loop.failed_gpus[gpu] = reason
                node = s.get(NodeRow, slot.node)
                if node is not None:
                    node.state = "drained"
                    node.reason = reason
                self.loop.store.event(s, "gpu_failed", None, node=slot.node, gpu=gpu, reason=why)
        for a in list(self.loop.attempts.values()):
            hit = [g for g in a.gpus if g in new]
            if hit and a.stop is None:
                self.loop.book[a.job].gpu_fault = self.loop.failed_gpus[hit[0]]
                self.stops.stop(a, GPU_FAILURE, now, grace=0.0)
        self.loop.nodes_dirty = True
        return True

    def _record_usage(self) -> None:
        usage = self.loop.executor.gpu_usage()
        self.loop.gpu_readings = MappingProxyType(dict(usage))
        if not usage or not self.loop.attempts:
            self.loop.job_usage = MappingProxyType({})
            return
        state = self.loop.live.state
        figures: dict[int, tuple[float, float | None]] = {}
        for a in self.loop.attempts.values():
            seen = [usage[g] for g in a.gpus if g in usage]
            if not seen:
                continue
            utilization = float(np.mean([u.utilization for u in seen]))
            mine = [gb for u in seen for pid, gb in u.processes.items() if _in_group(pid, a)]
            alone = all(self.loop.holders.get(g) == a.job for g in a.gpus)
            if mine:
                memory: float | None = float(sum(mine))
            elif alone:  # processes not visible (another pid namespace): the GPUs' use
                memory = float(sum(u.memory_used_gb for u in seen))
            else:
                memory = None
            figures[a.job] = (utilization, memory)
            i = self.loop.live.index.get(a.job)
            if memory is not None and i is not None and len(a.gpus):
                per_gpu = memory / len(a.gpus)
                known = state.gpu_memory[i]
                state.gpu_memory[i] = per_gpu if known != known else max(known, per_gpu)
        self.loop.job_usage = MappingProxyType(dict(figures))
        with self.loop.store.session() as s:
            for job, (utilization, memory) in figures.items():
                row = s.get(JobRow, job)
                if row is not None:
                    row.gpu_utilization = utilization
                    if memory is not None:
                        row.gpu_memory_gb = memory


def _in_group(pid: int, attempt: object) -> bool:
    """Whether ``pid`` belongs to the attempt (its process group: the launcher's)."""
    ref = getattr(attempt, "ref", None)
    if ref is None:
        return False
    try:
        return os.getpgid(pid) == ref.pid
    except OSError:
        return False
