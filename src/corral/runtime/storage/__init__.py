"""The service's durable state: the SQL store of jobs, attempts, nodes and
users (``store``) and the lock that lets one scheduler at a time write it
(``store_lock``).

May import: ``runtime.jobspec``. The loop and the API read and write the store;
execution never does (it reports through the loop).
"""
