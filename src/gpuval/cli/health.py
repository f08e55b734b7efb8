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
    since: Optional[str] = typer.Option(None, "--since", help="Xid window start: 'boot', a span (24h, 30m, 7d) or a "
                                        "time (2026-11-23T10:00, UTC) [default: the last xid pass here, else boot]."),
    dcgm: Optional[int] = typer.Option(None, "--dcgm", min=1, max=3, help="Also run NVIDIA DCGM's dcgmi diag at "
                                       "this level (1, 2 or 3); without dcgmi installed the dcgm_diag check is "
                                       "skipped and says so."),
) -> None:
    """Check this node: GPUs, ECC, clocks, PCIe, NVLink, InfiniBand, NCCL transport and bandwidth, topology."""
    from gpuval.cli.render import check_line, health_heading, tally
    from gpuval.errors import UsageError
    from gpuval.node.kernel_log import parse_since
    from gpuval.results import new_run_id
    from gpuval.workloads.health.run import run_health

    try:
        window = parse_since(since) if since else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    def say(line: str) -> None:
        if not as_json:
            console.print(line)

    run = run_health(recorded, sku, check, baseline or [], results, repeats, new_run_id(),
                     lambda ctx: say(health_heading(ctx)), lambda r: say(check_line(r)), since=window, dcgm=dcgm)
    if as_json:
        print_json([r.model_dump(mode="json") for r in run.records])
    else:
        console.print("  " + tally(r.status for r in run.suite.results))
    if run.suite.could_not_run:
        raise typer.Exit(EXIT_CANNOT_RUN)
    raise typer.Exit(EXIT_FAILED if run.suite.failed else 0)


def register(app: typer.Typer) -> None:
    app.command("health")(handle_errors(health))
