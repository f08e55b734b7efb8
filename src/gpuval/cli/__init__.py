"""The `gpuval` command. Thin: parse, call, render. Heavy imports live inside the commands that need them."""

from __future__ import annotations

import importlib
import sys
from typing import Optional

import typer

from gpuval import __version__

_cli = typer.Typer(
    name="gpuval",
    help="Tell, in minutes, whether a GPU cluster is healthy and performs as it should.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help strings carry "[default: ...]", which rich markup would swallow
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuval {__version__}")
        raise typer.Exit()


@_cli.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tell, in minutes, whether a GPU cluster is healthy and performs as it should."""


# Each command's module, in the order `gpuval --help` lists them. A command's module costs up to a tenth of a
# second to import (its models, its helpers); a fleet check or Slurm's health check starts gpuval hundreds of
# times, so `main` imports only the module of the command it runs.
COMMANDS = {module.rstrip("_"): module for module in (
    "validate", "bench", "parse", "health", "burn", "tune", "topo", "pin", "submit", "jobs", "azureml", "lammps", "train",
    "import_", "report", "history", "compare", "baseline", "deploy", "exporter", "fleet", "nodes")}


def _register(names: list[str]) -> typer.Typer:
    for name in names:
        importlib.import_module(f"gpuval.cli.{COMMANDS[name]}").register(_cli)
    return _cli


def __getattr__(name: str) -> typer.Typer:
    """`from gpuval.cli import app`: the whole command, every subcommand registered (tests, CliRunner)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    global app
    app = _register(list(COMMANDS))
    return app


def main() -> None:
    """Console-script entry point: the command named on the command line alone, or every one for the list (no
    command, --help, a misspelled one)."""
    named = sys.argv[1] if len(sys.argv) > 1 else None  # a root option first (--help, --version) lists them all
    _register([named] if named in COMMANDS else list(COMMANDS))
    _cli()
