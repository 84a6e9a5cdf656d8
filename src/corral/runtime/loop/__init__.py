"""The live scheduling loop: its state (``loop_base``) and one book of its jobs
(``job_book``), the policy's view kept in step with it (``live_state``), the pass
that observes, decides and acts (``scheduler``), and its stages, plain objects
each handed the state (``sharing``, ``stops``, ``round_jobs``, ``queueing``,
``recovery``, ``transitions``, ``parking``, ``launching``, ``gpu_watch``,
``exclusive``, ``user_limits``, ``warm_ahead``); estimates learned from history and Hare's task
rounds as live jobs (``round_policy``).

May import: every other part of the runtime, the model and the policies;
never the simulator or the API.
"""
