"""``python -m corral.cli``."""

from corral.cli import main

main()
