"""The trace formats corral reads (a light module: the CLI's help names them)."""

FORMATS = (
    "philly",
    "philly-log",
    "tiresias",
    "gavel",
    "gavel-msr",
    "gavel-6",
    "gavel-5",
    "shockwave",
    "pollux",
    "helios",
    "pai",
    "canonical",
)
