"""One walk over a plan for both engines, so the simulator and the live loop agree
on what a plan means and on which of its parts are valid.

A plan is carried out in one order everywhere: its directives are checked
against what the engine supports, then every stop, then every start. Each stop
and start is checked against the scheduler's state here, once (a stop only of a
running job; a start only of a waiting job, with as many GPUs as it asks unless
its policy resizes, of the GPU type it is bound to, over the nodes it asked
for, and a packed one only onto the GPUs of a running job that holds them and
shares them with none, or, time-sliced, with a group of any size). What
is valid is handed to the engine's :class:`PlanTarget`; what is not is handed to
its ``refuse``, and there the engines differ by design: the simulator stops the
run (a research policy's error must be loud), the live loop leaves the job
waiting and records why (one policy's slip must not stop a service).

Each stop and start, its check included, runs inside the target's ``about``:
the live loop contains there an error about one job (a plan naming GPUs that do
not exist) to that job, as it contains any other, and the pass goes on.

The engine then carries out what the walk handed it in its own way: the
simulator moves its state and its clock of finish times; the live loop writes
its job book and the store, and its executor acts after the pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from corral.model.cluster import Cluster
from corral.model.plan import DIRECTIVES, Directive, Plan, PlanError
from corral.model.state import PENDING, RUNNING, SchedulerState


class PlanTarget(Protocol):
    """An engine as a plan's walk sees it."""

    directives: Mapping[Directive, str]
    """Each directive this engine supports -> what it does with it."""

    def about(self, i: int, what: str) -> AbstractContextManager[object]:
        """Around the check and the carrying out of one stop or start of job ``i``
        (``what``: what is being done, for people): where an engine contains an
        error to the job it is about (the live loop sets that job aside)."""

    def refuse(self, i: int, what: str, why: str) -> None:
        """A stop or start of job ``i`` the state rules out (``what``: "stop" or
        "start"; ``why``: the reason, for people)."""

    def stop(self, i: int) -> None:
        """Stop running job ``i``."""

    def start(self, i: int, gpus: tuple[int, ...], host: int) -> None:
        """Start waiting job ``i`` on ``gpus`` (packed onto job ``host``'s GPUs when
        ``host`` >= 0)."""


def unsupported(plan: Plan, target: PlanTarget, engine: str) -> None:
    """Refuse a plan that uses a directive the engine does not support: carried out
    without it, the plan would mean something else than its policy meant."""
    if len(target.directives) == len(DIRECTIVES):
        return  # (it supports them all: the pass need not list the plan's)
    missing = plan.directives() - target.directives.keys()
    if missing:
        names = ", ".join(sorted(missing))
        raise PlanError(f"the plan uses {names}, which the {engine} does not support")


def start_problem(
    plan: Plan,
    state: SchedulerState,
    cluster: Cluster,
    i: int,
    gpus: tuple[int, ...],
    elastic: bool = False,
    resizes: bool = False,
) -> str | None:
    """Why the plan's start of job ``i`` on ``gpus`` cannot be carried out (None:
    it can). Its policy may give it any number of GPUs if it ``resizes``, and a
    multiple of what it asks if it is ``elastic``."""
    if state.status[i] != PENDING:
        return "it is not waiting"
    asked = int(state.gpus[i])
    given = len(gpus)
    if given != asked and not (resizes or (elastic and given % asked == 0)):
        return f"it was given {given} GPUs and asks for {asked}"
    bound = int(state.type_req[i])
    if bound >= 0 and any(int(cluster.gpu_type_id[g]) != bound for g in gpus):
        return f"it needs {cluster.gpu_type_names[bound]} GPUs"
    nodes = int(state.nodes_req[i])
    if nodes and not cluster.in_layout(gpus, nodes):
        return f"it needs {nodes} nodes"
    pack = plan.packs.get(i)
    if pack is not None:
        host = pack[0]
        shared = state.alloc[host]
        if state.status[host] != RUNNING or shared is None or not set(gpus) <= set(shared):
            return f"it is packed onto job {state.job_ids[host]}, which does not run there"
        if state.host[host] >= 0:
            return f"it is packed onto job {state.job_ids[host]}, which shares another's GPUs"
        if state.guest[host] >= 0 and i not in plan.timeslices:
            return f"it is packed onto job {state.job_ids[host]}, whose GPUs are shared already"
    return None


def apply_plan(
    plan: Plan,
    state: SchedulerState,
    cluster: Cluster,
    target: PlanTarget,
    engine: str,
    elastic: bool = False,
    resizes: bool = False,
) -> None:
    """Walk ``plan`` over ``state``: directives checked, then stops, then starts,
    each valid one handed to ``target`` and each other to its ``refuse``. A start
    packed onto a job started by the same plan sees that job running (stops and
    starts before it are carried out first)."""
    unsupported(plan, target, engine)
    status = state.status
    for i in plan.stops:
        with target.about(i, "applying the plan's stop"):
            if status[i] != RUNNING:
                target.refuse(i, "stop", "it is not running")
            else:
                target.stop(i)
    for i, gpus in plan.starts.items():
        with target.about(i, "applying the plan's start"):
            why = start_problem(plan, state, cluster, i, gpus, elastic, resizes)
            if why is not None:
                target.refuse(i, "start", why)
            else:
                target.start(i, gpus, plan.packs[i][0] if i in plan.packs else -1)
