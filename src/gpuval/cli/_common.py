"""What every command shares: consoles, error handling, JSON output, the results option."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import typer
from rich.console import Console

from gpuval.errors import EXIT_CANNOT_RUN, GpuvalError

console = Console(highlight=False, soft_wrap=True)  # never break a path or a command across lines
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])

RESULTS_HELP = "Append Result records (JSON Lines) to this file [default: gpuval's data directory]."


def command_group(help: str) -> typer.Typer:
    """A Typer app with gpuval's settings: `-h`, help on no arguments, and help text shown as written (rich markup
    would swallow the "[default: ...]" the help strings carry)."""
    return typer.Typer(
        help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
        rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
    )


def fail(message: str, code: int = EXIT_CANNOT_RUN) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    return typer.Exit(code)


def handle_errors(func: F) -> F:
    """Turn gpuval's errors into a one-line message and exit code 2; Ctrl-C into exit 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpuvalError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except OSError as exc:  # a file or folder the user named cannot be read or written
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}") from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: results measured so far were kept.")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def writable_file(path: Path | None) -> Path | None:
    """Check, before any work, that a file the user asked for can be written (its folder is created)."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuvalError(f"{path}: cannot create its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise GpuvalError(f"{path}: not writable")
    return path


def print_json(data: Any) -> None:
    """Print machine-readable JSON on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()
