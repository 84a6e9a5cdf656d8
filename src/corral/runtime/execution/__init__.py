"""How a job's processes run: the executors (local processes and Ray), the
root-run launcher that drops to the job's user, standby workers that keep an
interpreter warm, staging of a job's files, Unix identities, and the record of
how an attempt ended (``exits``).

May import: ``runtime.jobspec`` and, of the training library, the round
keeper's socket name. Never the loop or the store: execution is
told what to run and reports what happened.
"""
