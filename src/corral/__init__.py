"""corral: GPU cluster scheduling for deep-learning training.

The package is layered (see DESIGN): ``model`` holds the domain types,
``perf`` says how fast jobs run, ``placement`` picks concrete GPUs,
``policies`` decide who runs, ``traces`` load workloads and ``sim`` replays
them. Dependencies point downward only.
"""

__version__ = "0.1.0"
