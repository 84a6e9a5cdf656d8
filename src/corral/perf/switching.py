"""The cost of stopping a job and starting it again.

Figures are the average task-switch times of the Hare poster's Table 1 over
its eight models (VGG19 ... GraphSAGE): plain kill-and-restart 3.29-9.02 s
(mean 5.87 s), PipeSwitch 2.42-12.57 ms (mean 6.36 ms), Hare 0.96-5.79 ms
(mean 3.14 ms); Gandiva's suspend/resume at a mini-batch boundary takes about
100 ms. One switch = one stop plus one start; the simulator charges it when a
preempted job starts again, as GPU time during which it makes no progress.

``measured`` and ``measured-cold`` are what this machine measured instead:
``benchmarks/switching.py`` writes a *switching profile* (JSON) with the
median warm switch (two jobs resident in a standby worker, swapped in place)
and cold switch (checkpoint, new process, imports, rebuild, restore) of the
largest example model it measured, by default to :func:`default_profile_path`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from corral.errors import CorralError, InputError

_KILL_RESTART_MS = (3288.94, 5961.16, 7807.43, 9016.99, 5257.17, 5125.64, 5327.24, 5213.54)
_PIPESWITCH_MS = (4.01, 4.75, 5.03, 12.57, 10.34, 8.91, 2.86, 2.42)
_HARE_MS = (2.77, 2.04, 2.46, 5.03, 5.79, 4.27, 1.83, 0.96)


def _mean_s(values_ms: tuple[float, ...]) -> float:
    return sum(values_ms) / len(values_ms) / 1000.0


SWITCH_MECHANISMS: dict[str, float] = {
    "kill-restart": _mean_s(_KILL_RESTART_MS),
    "gandiva": 0.1,
    "pipeswitch": _mean_s(_PIPESWITCH_MS),
    "hare": _mean_s(_HARE_MS),
    "none": 0.0,
}
DEFAULT_SWITCH_MECHANISM = "kill-restart"
MEASURED_MECHANISMS = ("measured", "measured-cold")
"""Mechanisms whose seconds come from a switching profile this machine wrote."""
PROFILE_FORMAT = "corral switching profile 1"


def default_profile_path() -> Path:
    """Where the benchmark writes, and the simulator reads, the switching profile:
    ``$CORRAL_SWITCH_PROFILE``, else ``~/.config/corral/switching.json``."""
    named = os.environ.get("CORRAL_SWITCH_PROFILE")
    if named:
        return Path(named)
    return Path.home() / ".config" / "corral" / "switching.json"


def write_profile(path: Path, device: str, switches: int, models: dict[str, dict[str, Any]]) -> str:
    """Write a switching profile; the mechanisms' seconds are those of the model
    with the most parameters (the closest to a real training job). Returns it."""
    if not models:
        raise CorralError("a switching profile needs at least one measured model")
    largest = max(models, key=lambda name: models[name]["parameters"])
    profile = {
        "format": PROFILE_FORMAT,
        "device": device,
        "switches": switches,
        "model": largest,
        "mechanisms": {
            "measured": models[largest]["warm_median_s"],
            "measured-cold": models[largest]["cold_median_s"],
        },
        "models": models,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return largest


def read_profile(path: Path) -> dict[str, Any]:
    """A switching profile, checked: a clear error names the file and the field."""
    where = str(path)
    if not path.is_file():
        raise CorralError(
            f"no switching profile at {where}: run 'python benchmarks/switching.py' to "
            "measure this machine (it writes one there), or name one with --switch-profile"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(where, exc.lineno, None, f"not valid JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(where, None, None, f"cannot be read ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != PROFILE_FORMAT:
        raise InputError(where, None, "format", f"expected '{PROFILE_FORMAT}'")
    mechanisms = raw.get("mechanisms")
    if not isinstance(mechanisms, dict):
        raise InputError(where, None, "mechanisms", "expected an object of seconds by name")
    for name in MEASURED_MECHANISMS:
        value = mechanisms.get(name)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:  # type: ignore[arg-type,operator]
            raise InputError(
                where, None, f"mechanisms.{name}", f"expected seconds >= 0, got {value!r}"
            )
    return raw


def switch_cost_seconds(value: str | float | None, profile: Path | None = None) -> float:
    """Seconds per switch from a mechanism name or a number of seconds; the
    ``measured`` mechanisms read ``profile`` (default: :func:`default_profile_path`)."""
    if value is None:
        return SWITCH_MECHANISMS[DEFAULT_SWITCH_MECHANISM]
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        if text in SWITCH_MECHANISMS:
            return SWITCH_MECHANISMS[text]
        if text in MEASURED_MECHANISMS:
            measured = read_profile(profile or default_profile_path())["mechanisms"]
            return float(measured[text])
        try:
            seconds = float(text)
        except ValueError:
            names = [*SWITCH_MECHANISMS, *MEASURED_MECHANISMS]
            raise CorralError(
                f"--switch-cost must be seconds or one of {', '.join(names)}; got '{value}'"
            ) from None
    if not seconds >= 0:
        raise CorralError(f"--switch-cost must be >= 0 seconds, got {value}")
    return seconds


MIGRATION_1_GPU_S = 5.0
MIGRATION_8_GPU_S = 35.0


def migration_seconds(gpus: int) -> float:
    """Seconds to move a job of ``gpus`` GPUs to other GPUs (checkpoint, copy, restore).

    Gandiva reports migrating a 1-GPU job in seconds and an 8-GPU job in about
    35 s; this interpolates linearly between 5 s and 35 s (and beyond, per GPU).
    """
    per_gpu = (MIGRATION_8_GPU_S - MIGRATION_1_GPU_S) / 7
    return MIGRATION_1_GPU_S + per_gpu * max(gpus - 1, 0)
