"""`gpuval parse FILE...`: nccl-tests logs (text or JSON) and the other logs gpuval reads, as results."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from gpuval.cli._common import console, handle_errors, print_json


def parse(
    files: List[Path] = typer.Argument(..., help="Log files: nccl-tests output or -J JSON, and other supported logs."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array, one object per test or log found."),
) -> None:
    """Read logs and print what they measured."""
    from gpuval.cli.render import summarize
    from gpuval.workloads.ingest import parse_file

    found = [doc for path in files for _, doc in parse_file(path)]
    if as_json:
        print_json([doc.to_json() for doc in found])
        return
    for doc in found:
        summarize(doc, console)


def register(app: typer.Typer) -> None:
    app.command("parse", no_args_is_help=True)(handle_errors(parse))
