"""An admission rule: a cap on the queue, and a quota on a gang's size.

Run it with any policy, in the simulator and live::

    corral compare --policies fifo,las \
        --admission 'examples/policies/queue_cap.py:QueueCap[waiting=20]'

    # the service's config
    admission: /home/me/policies/queue_cap.py:QueueCap[waiting=20,max_gpus=16]

A job asking for more than ``max_gpus`` GPUs is refused; while ``waiting`` jobs
or more are queued, an arriving job is kept out of the queue and asked about
again every ``recheck`` seconds (Blox's "accept until the queue is full",
with a retry instead of a refusal).
"""

from __future__ import annotations

from corral.model.state import SchedulerState
from corral.policies.admission import ADMIT, Admission, Verdict, delay, reject


class QueueCap(Admission):
    name = "queue-cap"
    description = "refuse gangs over max_gpus; hold arrivals while the queue is full"

    def __init__(self, waiting: int = 50, max_gpus: int = 64, recheck: float = 60.0) -> None:
        if waiting < 1 or max_gpus < 1 or recheck <= 0:
            raise ValueError("waiting and max_gpus must be at least 1, recheck positive")
        self.waiting, self.max_gpus, self.recheck = waiting, max_gpus, recheck

    def admit(self, state: SchedulerState, i: int) -> Verdict:
        gpus = int(state.gpus[i])
        if gpus > self.max_gpus:
            return reject(f"asks for {gpus} GPUs; the most a job may have is {self.max_gpus}")
        if len(state.pending) >= self.waiting:
            return delay(f"{len(state.pending)} jobs already wait", state.now + self.recheck)
        return ADMIT
