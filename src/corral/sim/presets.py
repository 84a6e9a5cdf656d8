"""Named sets of assumptions that reproduce a peer simulator's (``--preset``).

A light module: the CLI's help names them without importing the engine.
"""

from __future__ import annotations

SIM_PRESETS: dict[str, str] = {
    "tiresias-sim": (
        "the assumptions of Tiresias' published simulator: GPU counting without placement "
        "constraints or locality slowdown, no switching cost, 3 queues at 3250/7200 "
        "GPU-seconds, Gittins from yarn-gput1000 with delta 3250 read from its own rounded "
        "table (ties: earliest submitted first), its queues as lists (a demoted job joins the "
        "end of its new queue) and its wake-up for demotions computed from run time"
    ),
    "gavel-sim": (
        "the assumptions of Gavel's published simulator: GPU counting with every gang on one "
        "GPU type, at its measured throughput wherever it is placed, no switching cost, "
        "360 s rounds that leave GPUs "
        "freed mid-round idle, the allocation reset at most every 1,920 s"
    ),
    "pollux-sim": (
        "the assumptions of Pollux's artifact simulator: a scheduling pass every 60 s "
        "(arrivals and freed GPUs wait for it), 30 s without progress at every allocation, "
        "first starts included, Pollux's jobs starting from their model's smallest trained "
        "batch, and its Tiresias with 2 queues at 16 GPU-hours; placement and locality stay "
        "corral's"
    ),
}
