"""The cost of stopping a job and starting it again.

Figures are the average task-switch times of the Hare poster's Table 1 over
its eight models (VGG19 ... GraphSAGE): plain kill-and-restart 3.29-9.02 s
(mean 5.87 s), PipeSwitch 2.42-12.57 ms (mean 6.36 ms), Hare 0.96-5.79 ms
(mean 3.14 ms); Gandiva's suspend/resume at a mini-batch boundary takes about
100 ms. One switch = one stop plus one start; the simulator charges it when a
preempted job starts again, as GPU time during which it makes no progress.
"""

from __future__ import annotations

from corral.errors import CorralError

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


def switch_cost_seconds(value: str | float | None) -> float:
    """Seconds per switch from a mechanism name or a number of seconds."""
    if value is None:
        return SWITCH_MECHANISMS[DEFAULT_SWITCH_MECHANISM]
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        if text in SWITCH_MECHANISMS:
            return SWITCH_MECHANISMS[text]
        try:
            seconds = float(text)
        except ValueError:
            raise CorralError(
                f"--switch-cost must be seconds or one of {', '.join(SWITCH_MECHANISMS)}; "
                f"got '{value}'"
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
