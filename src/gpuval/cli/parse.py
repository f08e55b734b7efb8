"""`gpuval parse FILE...`: nccl-tests logs (text or JSON) and the other logs gpuval reads, as results. Each file is
read in one pass, a piece at a time, and each document is printed as it is found: memory does not grow with the
file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List

import typer

from gpuval.cli._common import console, handle_errors


def _print_json_array(files: List[Path]) -> None:
    """The JSON array `--json` prints, written one document at a time (closed even when a file is bad)."""
    from gpuval.workloads.ingest import iter_documents

    out = sys.stdout
    out.write("[")
    first = True
    try:
        for path in files:
            for _, doc in iter_documents(path):
                out.write("\n" if first else ",\n")
                out.write(json.dumps(doc.to_json(), indent=2, default=str))
                first = False
    finally:
        out.write("\n]\n" if not first else "]\n")
        out.flush()


def parse(
    files: List[Path] = typer.Argument(..., help="Log files: nccl-tests output or -J JSON, and other supported logs."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array, one object per test or log found."),
) -> None:
    """Read logs and print what they measured."""
    from gpuval.cli.render import summarize
    from gpuval.workloads.ingest import iter_documents

    if as_json:
        _print_json_array(files)
        return
    for path in files:
        for _, doc in iter_documents(path):
            summarize(doc, console)


def register(app: typer.Typer) -> None:
    app.command("parse", no_args_is_help=True)(handle_errors(parse))
