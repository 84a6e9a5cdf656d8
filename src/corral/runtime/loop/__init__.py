"""The live scheduling loop: the state it builds from the store
(``live_state``), the pass that asks the policy for a plan (``scheduler``,
``loop_base``), the transitions it applies (start, preempt, park, share,
finish), estimates learned from history, adoption after a restart
(``recovery``) and Hare's task rounds as live jobs (``round_jobs``,
``round_policy``).

May import: every other part of the runtime, the model and the policies;
never the simulator or the API.
"""
