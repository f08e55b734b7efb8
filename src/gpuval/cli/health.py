"""`gpuval health`: every node check with a verdict, a fault code and a one-line reason."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, print_json, recorded_option, sku_option
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED


def health(
    sku: Optional[str] = sku_option(),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeat for several)."),
    baseline: Optional[List[Path]] = typer.Option(None, "--baseline", help="Your own baseline YAML (repeatable)."),
    recorded: Optional[str] = recorded_option(),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Best of N runs for the NCCL bandwidth checks."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of the checks' Result records."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Check this node: GPUs, ECC, clocks, PCIe, NVLink, InfiniBand, NCCL transport and bandwidth, topology."""
    from gpuval.cli.render import check_line, health_heading, tally
    from gpuval.results import new_run_id
    from gpuval.workloads.health.run import run_health

    def say(line: str) -> None:
        if not as_json:
            console.print(line)

    run = run_health(recorded, sku, check, baseline or [], results, repeats, new_run_id(),
                     lambda ctx: say(health_heading(ctx)), lambda r: say(check_line(r)))
    if as_json:
        print_json([r.model_dump(mode="json") for r in run.records])
    else:
        console.print("  " + tally(r.status for r in run.suite.results))
    if run.suite.could_not_run:
        raise typer.Exit(EXIT_CANNOT_RUN)
    raise typer.Exit(EXIT_FAILED if run.suite.failed else 0)


def register(app: typer.Typer) -> None:
    app.command("health")(handle_errors(health))
