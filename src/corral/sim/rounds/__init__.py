"""Hare's execution model: jobs as rounds of tasks that may run on different GPUs.

The gang engine (:mod:`corral.sim.engine`) runs a job on all its GPUs at
once. Here a job is a sequence of synchronised rounds of ``g`` tasks; each
task runs on one GPU for its type's time, the tasks of one round may run on
different GPU types and at different times, and the next round starts when
the last task of this one ends. Every time a GPU switches to another job's
task it pays the switching mechanism's cost. Planners decide, for every
task, its GPU and start; the simulator re-plans whenever jobs arrive.
"""
