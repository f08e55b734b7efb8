"""`gpuval health`: every node check with a verdict, a fault code and a one-line reason."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, print_json
from gpuval.cli._machine import open_machine, recorded_option, sku_option
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "magenta", "skipped": "dim"}


def _show(value: object) -> str:
    if value is None:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_health(sku: str | None, checks: list[str] | None, baselines: list[Path], recorded: str | None,
               results: Path | None, repeats: int, quiet: bool, run_id: str | None = None):  # type: ignore[no-untyped-def]
    """Run the suite on this machine or a recording, printing each result as it comes (unless quiet)."""
    from gpuval.results import new_run_id
    from gpuval.workloads.health_suite import run_health_suite

    machine = open_machine(recorded)

    def heading(ctx) -> None:  # type: ignore[no-untyped-def]
        base = f"baseline {ctx.baseline.sku}" if ctx.baseline else "no baseline for this SKU: limits every SKU shares"
        console.print(f"[bold]gpuval health[/]: {machine.description}, SKU {ctx.sku or 'unknown'} ({base})")

    def line(result) -> None:  # type: ignore[no-untyped-def]
        style = _STYLE[result.status.value]
        console.print(f"  [{style}]{result.status.value.upper():7}[/] {result.name:20} {result.fault_code:18} "
                      f"{_show(result.value)} {result.unit if result.value is not None else ''}  "
                      f"[dim]{result.reason}[/]")

    quietly = (lambda *_a: None)
    return run_health_suite(machine, bool(recorded), sku, checks, baselines, results, repeats,
                            run_id or new_run_id(), quietly if quiet else heading, quietly if quiet else line)


def health(
    sku: Optional[str] = sku_option(),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeat for several)."),
    baseline: Optional[List[Path]] = typer.Option(None, "--baseline", help="Your own baseline YAML (repeatable)."),
    recorded: Optional[str] = recorded_option(),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Best of N runs for the NCCL bandwidth checks."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON array of check results."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Check this node: GPUs, ECC, clocks, PCIe, NVLink, InfiniBand, NCCL transport and bandwidth, topology."""
    run = run_health(sku, check, baseline or [], recorded, results, repeats, quiet=as_json)
    if as_json:
        print_json([r.to_json() for r in run.results])
    else:
        counts = {s: sum(r.status.value == s for r in run.results) for s in _STYLE}
        console.print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if run.could_not_run:
        raise typer.Exit(EXIT_CANNOT_RUN)
    raise typer.Exit(EXIT_FAILED if run.failed else 0)


def register(app: typer.Typer) -> None:
    app.command("health")(handle_errors(health))
