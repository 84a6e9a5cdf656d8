"""Example training jobs that use :mod:`corral.train` (need the ``examples`` extra: torch)."""
