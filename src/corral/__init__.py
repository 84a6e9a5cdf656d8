"""corral: GPU cluster scheduling for deep-learning training.

The package is layered (docs/layout.md draws it, and
``tests/test_layers.py`` checks it): ``model`` holds the domain types,
``perf`` says how fast jobs run, ``placement`` picks concrete GPUs,
``policies`` decide who runs, ``traces`` load workloads, ``sim`` replays them
and ``runtime`` runs them live, with ``api`` and ``cli`` on top. Dependencies
point downward only. A policy of your own: ``docs/writing-a-policy.md``.
"""

__version__ = "0.1.0"

from corral.lazy import lazy_exports

_WHERE = {
    "Experiment": "corral.sim.experiment",
    "Results": "corral.sim.experiment",
}
__getattr__ = lazy_exports("corral", _WHERE)
__all__ = ["Experiment", "Results", "__version__"]
