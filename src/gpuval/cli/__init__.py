"""The `gpuval` command. Thin: parse, call, render. Heavy imports live inside the commands that need them."""

from __future__ import annotations

from typing import Optional

import typer

from gpuval import __version__

app = typer.Typer(
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


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tell, in minutes, whether a GPU cluster is healthy and performs as it should."""


def _register() -> None:
    from gpuval.cli import (
        azureml, bench, burn, compare, deploy, exporter, fleet, health, history, import_, jobs, lammps, nodes, parse,
        pin, report, submit, topo, train, tune, validate,
    )

    for module in (validate, bench, parse, health, burn, tune, topo, pin, submit, jobs, azureml, lammps, train,
                   import_, report, history, compare, deploy, exporter, fleet, nodes):
        module.register(app)


_register()


def main() -> None:
    """Console-script entry point."""
    app()
