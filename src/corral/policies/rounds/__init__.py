"""Hare's round model as policies see it: the workload of rounds of tasks
(``workload``), the list scheduler that turns an order into task placements
(``listsched``) and the planners (``planners``: hare, sched-allox,
sched-homo). The simulator's round engine (:mod:`corral.sim.rounds`) and the
live service's round policy (:mod:`corral.runtime.loop.round_policy`) both
run these planners; neither is imported here.
"""
