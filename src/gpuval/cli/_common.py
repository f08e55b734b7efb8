"""What every command shares: consoles, error handling, JSON output, the options several commands take (--db,
--sku, --recorded, --results, --opt, --on) and their help, KEY=VALUE and rank-list parsing. No command module
imports another; what two commands share lives here or in cli/render.py."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from gpuval.engines import engine_names
from gpuval.errors import EXIT_CANNOT_RUN, GpuvalError, UsageError

# Never break a path or a command across lines; never turn `:b:` in what a user typed into an emoji.
console = Console(highlight=False, soft_wrap=True, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

F = TypeVar("F", bound=Callable[..., Any])

RESULTS_HELP = "Append Result records (JSON Lines) to this file [default: gpuval's data directory]."
DB_HELP = ("Results database: a SQLite file path or a SQLAlchemy URL (postgresql://user@host/db) "
           "[default: GPUVAL_DB, else results.db in gpuval's data directory].")
RECORDED_HELP = ("Judge a recorded machine instead of this one: a packaged SKU (Standard_ND96asr_v4, "
                 "Standard_ND96isr_H100_v5), h200-vm or h200-vm-busy (a real 1 x H200 VM, idle and while another "
                 "process used its GPU), or a YAML file.")
ALLOW_BUSY_HELP = ("Measure GPUs another process uses and report the figures without judging them (by default such "
                   "a check is an ERROR, GPU_BUSY, and measures nothing).")
SKU_HELP = "Azure VM size, e.g. Standard_ND96asr_v4 [default: GPUVAL_SKU, else the instance metadata service]."
ON_HELP = f"Engine: {', '.join(engine_names()[:-1])} or {engine_names()[-1]}."  # the registry's names
OPT_HELP = "Engine option KEY=VALUE (repeat): e.g. namespace=gpu (kubernetes), workspace=ws (azureml)."


def db_option() -> Any:
    """A fresh `--db` option."""
    return typer.Option(None, "--db", help=DB_HELP)


def recorded_option() -> Any:
    """A fresh `--recorded SKU|FILE` option."""
    return typer.Option(None, "--recorded", metavar="SKU|FILE", help=RECORDED_HELP)


PROFILE_HELP = ("A node profile YAML describing this node type (profile: NAME, optionally inherits: SKU, and the "
                "node-level figures, each with its source; docs/baselines.md): it replaces the SKU's baseline. "
                "GPU-level figures come from the GPU model found on the node.")


def profile_option() -> Any:
    """A fresh `--profile FILE` option."""
    return typer.Option(None, "--profile", metavar="FILE", help=PROFILE_HELP)


BASELINE_HELP = ("Your own baseline YAML (repeatable): a SKU of your own (sku:, optionally inherits: SKU) or an "
                 "override of a packaged one, every figure with its source (docs/baselines.md).")


def baseline_option() -> Any:
    """A fresh `--baseline FILE` option (repeatable)."""
    return typer.Option(None, "--baseline", metavar="FILE", help=BASELINE_HELP)


def baseline_files(baseline: list[Path] | None, profile: Path | None) -> tuple[Path, ...]:
    """The one baseline source of a command that judges: the site's baseline folder (gpuval.baselines.site), the
    user's `--baseline` files, then the `--profile` file (the loader tells a profile by its `profile:` key), as
    absolute paths (a job on other nodes reads the same files), each once. They are read and checked here, once: a
    bad file (not YAML, an alias, an unknown key, a figure without its source, a limit that is no finite number) is
    one line and exit 2 before the command does anything."""
    from gpuval.baselines import baseline_source
    from gpuval.baselines.site import site_files

    named = (p.absolute() for p in (*(baseline or ()), *((profile,) if profile else ())))
    files = tuple(dict.fromkeys((*site_files(), *named)))
    baseline_source(files)
    return files


def sku_option() -> Any:
    """A fresh `--sku` option."""
    return typer.Option(None, "--sku", help=SKU_HELP)


def command_group(help: str) -> typer.Typer:
    """A Typer app with gpuval's settings: `-h`, help on no arguments, and help text shown as written (rich markup
    would swallow the "[default: ...]" the help strings carry)."""
    return typer.Typer(
        help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
        rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
    )


def fail(message: str, code: int = EXIT_CANNOT_RUN) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)  # the message is text, not markup
    return typer.Exit(code)


def _finite_positive(options: dict[str, Any]) -> None:
    """Every float option gpuval takes is a quantity above 0 (seconds, a share): a value that is no finite number
    above 0 (nan, inf, 0, -5) is refused here, once for every command, before it can judge or time anything."""
    for name, value in options.items():
        if isinstance(value, float) and not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{name.replace('_', '-')} {value}: give a finite number above 0")


def handle_errors(func: F) -> F:
    """Turn gpuval's errors into a one-line message and exit code 2; Ctrl-C into exit 130; any other exception
    (a bug, input no reader foresaw) into one line and exit 2 too, never a traceback and never exit 1, which
    means "a check failed". The float options are checked first (_finite_positive)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            _finite_positive(kwargs)
            return func(*args, **kwargs)
        except GpuvalError as exc:
            raise fail(str(exc), exc.exit_code) from None
        except OSError as exc:  # a file or folder the user named cannot be read or written
            where = f"{exc.filename}: " if exc.filename else ""
            raise fail(f"{where}{exc.strerror or exc}") from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: results measured so far were kept.")
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
            raise  # the command's own exit code (1: a check failed) and typer's usage errors, as they are
        except Exception as exc:  # a bug, or input no reader foresaw: "could not run", never 1 and no traceback
            raise fail(unexpected(exc)) from None

    return wrapper  # type: ignore[return-value]


def unexpected(exc: BaseException) -> str:
    """An exception no command foresaw, in one line: its class, where gpuval raised it, and its message's first
    line (a MemoryError has none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}gpuval{os.sep}" in f.filename] or frames
    where = f" at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
    said = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"unexpected {type(exc).__name__}{where}{': ' + said if said else ''} (a gpuval bug: please report it)"


def writable_file(path: Path | None) -> Path | None:
    """Check, before any work, that a file the user asked for can be written (its folder is created)."""
    if path is None:
        return None
    if path.is_dir():
        raise GpuvalError(f"{path}: is a folder; give a file name")
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


def parse_options(items: Optional[list[str]]) -> dict[str, object]:
    """--opt KEY=VALUE pairs; a value starting with [ or { is read as YAML (lists, maps), as every YAML a user
    gives is read (gpuval.node.yaml_input: no aliases, bounded nesting)."""
    from gpuval.node.yaml_input import read_yaml

    options: dict[str, object] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--opt {item!r}: use KEY=VALUE")
        options[key] = read_yaml(value, f"--opt {key}") if value[:1] in "[{" else value
    return options


def key_values(items: Optional[list[str]], flag: str) -> dict[str, str]:
    """--env NAME=VALUE pairs: NAME a variable name, VALUE taken as written."""
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"{flag} {item!r}: use NAME=VALUE with a variable name")
        pairs[key] = value
    return pairs


def parse_ranks(text: str, flag: str = "--ranks") -> list[int]:
    """'1,2,4' -> [1, 2, 4]; anything else is a one-line error."""
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: give rank counts separated by commas, e.g. 1,2,4") from None
    if not ranks or min(ranks) < 1:
        raise UsageError(f"{flag} {text!r}: rank counts must be positive")
    return ranks
