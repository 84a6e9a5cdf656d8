"""The training library: checkpoint, resume, report progress, stop when told."""

from corral.train.noise import GradientNoise
from corral.train.session import STOPPED_EXIT, Session

__all__ = ["STOPPED_EXIT", "GradientNoise", "Session"]
