"""Errors that end a command with a one-line message instead of a traceback.

Exit codes follow DESIGN.md: 0 all good, 1 something failed a check, 2 could not run.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 2


class GpuvalError(Exception):
    """Could not run: bad input, missing driver or tool, engine error. Exit code 2."""

    exit_code = EXIT_CANNOT_RUN


class UsageError(GpuvalError):
    """The user's input is wrong (flag value, file content)."""


class MissingDependency(GpuvalError):
    """A tool or library the command needs is not installed; the message says how to get it."""


class EngineError(GpuvalError):
    """The engine (Slurm, Kubernetes, Azure ML, mpirun) refused or failed."""
