"""The live scheduler, in four parts (each one's docstring says what it may
import; ``tests/test_layers.py`` checks it):

* :mod:`corral.runtime.jobspec`: what users and admins write;
* :mod:`corral.runtime.storage`: the store and its lock;
* :mod:`corral.runtime.execution`: how a job's processes run;
* :mod:`corral.runtime.loop`: the scheduling loop that uses the other three.

The runtime never imports the simulator or the API.
"""
