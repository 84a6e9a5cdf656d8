"""The trace formats corral reads (a light module: the CLI's help names them)."""

FORMATS = ("philly", "tiresias", "gavel", "gavel-msr", "shockwave", "pollux", "canonical")
