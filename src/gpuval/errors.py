"""Errors that end a command with a one-line message instead of a traceback.

Exit codes: 0 all good, 1 something failed a check, 2 could not run (bad input, missing tool, engine error).
"""

from __future__ import annotations

from typing import Any

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


def validation_error(exc: Any, context: str = "", with_field: bool = True, as_flag: bool = False) -> UsageError:
    """pydantic's ValidationError as the one-line UsageError every command shows: its first error, without
    pydantic's "Value error, " prefix, after `context: ` and the field (`as_flag`: spelled as a command-line flag,
    --batch-size), so bad input reads the same wherever a model checks it."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    loc = ".".join(str(p) for p in first.get("loc", ()))
    if with_field and loc:
        message = f"{'--' + loc.replace('_', '-') if as_flag else loc}: {message}"
    return UsageError(f"{context}: {message}" if context else message)
