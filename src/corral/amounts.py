"""Amounts as people who use Slurm write them (memory: ``16G``, ``512M``, or MiB).
(Standard library only: the command line checks a script's ``#SBATCH`` lines
before it talks to the service, and must start fast.)"""

from __future__ import annotations

import re
from typing import Any

_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?$", re.IGNORECASE)


def parse_memory(value: Any) -> int:
    """MiB from a number (MiB, Slurm's default unit) or ``512M``, ``16G``, ``1.5T``."""
    if isinstance(value, bool):
        raise ValueError("expected an amount of memory")
    if isinstance(value, int | float):
        mib = float(value)
    else:
        match = _MEMORY.match(str(value).strip())
        if match is None:
            raise ValueError(f"'{value}' is not an amount of memory (e.g. 16G, 512M, 4096)")
        number, unit = float(match.group(1)), match.group(2).upper()
        mib = number * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[unit]
    if not 1 <= mib <= 1024**3:  # between 1 MiB and 1 PiB
        raise ValueError("memory must be between 1M and 1P")
    return int(mib)
