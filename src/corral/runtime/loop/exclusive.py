"""Exclusive jobs (sbatch's ``--exclusive``): a node that runs one runs no other job.

Policies know nothing of it (the simulator's traces have no such jobs); the loop
keeps the rule around them, in two steps of each pass:

- **Fence** (before the policy plans): the free GPUs of every node where an
  exclusive job runs are taken from the policy's view, so no policy places,
  packs or backfills a job there. They come back at the first pass after that
  job stops.
- **Keep** (after the policy plans): a start that would break the rule is not
  carried out: an exclusive job planned onto a node where another job runs or
  is starting in the same plan, and any job planned beside an exclusive start.
  The job stays queued with the reason, and the next pass plans again.

An exclusive job thus waits for whole idle nodes, as under Slurm; with no
reservation for it, small jobs arriving on a busy cluster can keep it waiting
(Slurm's backfill reserves nodes for the queue's head; corral's policies
decide the order, and only ones that reserve, like FIFO's strict head, hold
GPUs back for it).
"""

from __future__ import annotations

from corral.model.plan import Plan
from corral.runtime.loop.loop_base import LoopState

EXCLUSIVE_WAIT = "Resources (--exclusive: waits for whole idle nodes)"
"""A queued exclusive job's reason while the plan could not give it whole nodes."""


class ExclusiveNodes:
    """Nodes that run an exclusive job run nothing else."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    def _exclusive_nodes(self) -> set[int]:
        """Nodes where an exclusive job runs or is starting."""
        st, live = self.loop.live.state, self.loop.live
        node = self.loop.cluster.gpu_node_list
        out: set[int] = set()
        exclusive = self.loop.book.having("exclusive")
        for i in st.running:
            if live.ids[i] in exclusive:
                out.update(node[g] for g in st.alloc[i] or ())
        return out

    def fence_exclusive(self) -> None:
        """Take the free GPUs of nodes with an exclusive job from the policy's view;
        give back those whose exclusive job has stopped."""
        free = self.loop.live.state.free
        nodes = self._exclusive_nodes() if self.loop.book.having("exclusive") else set()
        node = self.loop.cluster.gpu_node_list
        back = [g for g in self.loop.fenced if node[g] not in nodes]
        if back:
            self.loop.fenced.difference_update(back)
            # a node drained meanwhile keeps its GPUs from the policy as drained ones
            self.loop.reserved.update(g for g in back if not self.loop.usable[g])
            free.release([g for g in back if self.loop.usable[g]])
        if not nodes:
            return
        take = [
            g
            for g in range(len(node))
            if node[g] in nodes and free.mask[g] and g not in self.loop.reserved
        ]
        if take:
            free.take(take)
            self.loop.fenced.update(take)

    def keep_exclusive(self, plan: Plan) -> Plan:
        """The plan without the starts that would put an exclusive job beside another."""
        exclusive = self.loop.book.having("exclusive")
        if not exclusive or not plan.starts:
            return plan
        st, live = self.loop.live.state, self.loop.live
        node = self.loop.cluster.gpu_node_list
        stopped = set(plan.stops)
        busy: set[int] = set()  # nodes where a job runs on after the plan
        for i in st.running:
            if i not in stopped:
                busy.update(node[g] for g in st.alloc[i] or ())
        # the starts in the plan's order (the policy's), first come first kept: an
        # exclusive start needs its nodes free of running jobs and of starts kept
        # before it; any other start needs its nodes free of a kept exclusive one.
        # (Dropping every start that met one beside an exclusive start left a
        # one-node cluster idle for good: each pass planned them together again.)
        taken: set[int] = set()  # nodes of starts kept so far
        walled: set[int] = set()  # nodes of exclusive starts kept
        dropped: list[int] = []
        self.loop.exclusive_skipped.clear()
        for i, gpus in plan.starts.items():
            nodes = {node[g] for g in gpus}
            if live.ids[i] in exclusive:
                keep = not nodes & (busy | taken)
                if keep:
                    walled |= nodes
            else:
                keep = not nodes & walled
            if keep:
                taken |= nodes
            else:
                dropped.append(i)
        if not dropped:
            return plan
        with self.loop.store.session() as s:
            for i in dropped:
                job = live.ids[i]
                plan.drop_start(i)
                why = "its nodes are not idle" if job in exclusive else "beside --exclusive"
                self.loop.store.event(s, "start_skipped", job, why=why)
                if job in exclusive:
                    self.loop.exclusive_skipped.add(job)
        return plan
