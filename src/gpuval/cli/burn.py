"""`gpuval burn`: every GPU under a GEMM load at once, clocks and results checked; one verdict with a fault code."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, print_json, recorded_option, sku_option
from gpuval.cli._common import ALLOW_BUSY_HELP
from gpuval.cli._common import baseline_files, baseline_option, profile_option


def burn(
    duration: str = typer.Option("60s", "--duration", help="How long to load the GPUs: seconds, or 90s, 5m, 1h."),
    sku: Optional[str] = sku_option(),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    recorded: Optional[str] = recorded_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the burn's Result record as JSON."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
    allow_busy: bool = typer.Option(False, "--allow-busy", help=ALLOW_BUSY_HELP),
) -> None:
    """Load every GPU at once with a GEMM: per-GPU TFLOPS and their spread, clocks, power, temperatures and
    slowdown reasons sampled, results of the same input compared. Exit 1 on a GPU that slows, throttles or
    computes differently; 2 when it could not run or judged nothing (0 pass or warn)."""
    from gpuval.cli.render import check_line
    from gpuval.results import new_run_id
    from gpuval.workloads.burn.run import parse_duration, run_burn

    seconds = parse_duration(duration)
    if not as_json:
        console.print(f"[bold]gpuval burn[/]: every GPU at once for {seconds:g} s")
    run = run_burn(seconds, recorded, sku, baseline_files(baseline, profile), results, new_run_id(), allow_busy)
    if as_json:
        print_json(run.record.model_dump(mode="json"))
    else:
        console.print(check_line(run.result))
    raise typer.Exit(run.verdict.exit_code)


def register(app: typer.Typer) -> None:
    app.command("burn")(handle_errors(burn))
