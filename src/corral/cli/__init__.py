"""The ``corral`` command: the simulator's verbs (:mod:`corral.cli.sim`) and the
service's (:mod:`corral.cli.service`) on one Typer app (:mod:`corral.cli.app`).

Importing the verb modules registers their commands; the simulator's come
first in ``corral --help``."""

# isort: skip_file
from corral.cli.app import app, console, main
from corral.cli import sim
from corral.cli import service
from corral.cli import interactive
from corral.cli import store
from corral.cli import traces

__all__ = ["app", "console", "interactive", "main", "service", "sim", "store", "traces"]
