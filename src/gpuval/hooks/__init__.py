"""Opt-in hooks a training script imports to be diagnosable (docs/jobs-diagnose.md): `StepTimer` times each step's
compute and collective wait per rank and prints a step record every N steps; it keeps the rank's state file current
and registers a signal that dumps the rank's Python stacks. Importing this package costs no torch import."""

from gpuval.hooks.record import PREFIX, StepRecord, read_line
from gpuval.hooks.timer import StepTimer

__all__ = ["PREFIX", "StepRecord", "StepTimer", "read_line"]
