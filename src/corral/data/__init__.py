"""Bundled data sets (see PROVENANCE.md in this folder)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(*parts: str) -> Path:
    """Path of a bundled data file, e.g. ``data_path("philly", "jobs.csv.gz")``."""
    return Path(str(resources.files("corral.data").joinpath(*parts)))
