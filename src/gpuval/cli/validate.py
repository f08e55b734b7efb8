"""`gpuval validate`: the main job. This machine's health checks, the all_reduce sweep, one verdict."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, print_json, writable_file
from gpuval.cli._machine import sku_option
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED


def _summary_lines(table, wrong: int, sweep_status, sweep_line: str, health) -> list[str]:  # type: ignore[no-untyped-def]
    from gpuval.collectives.sizes import format_size

    peak, last = table.peak(), table.rows[-1]
    counts = {s: sum(r.status.value == s for r in health.results) for s in ("pass", "warn", "fail", "error", "skipped")}
    lines = [
        f"all_reduce: peak busbw {peak.best_busbw():.2f} GB/s at {format_size(peak.size)}, "
        f"{last.best_busbw():.2f} GB/s at the largest size {format_size(last.size)}, {wrong} wrong elements",
        f"  sweep: {sweep_status.value}: {sweep_line}",
        "  health: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n),
    ]
    lines += [f"    {r.status.value.upper()} {r.name}: {r.reason}" for r in health.results
              if r.status.value in ("fail", "error", "warn")]
    return lines


def _report(run_id: str, target: Optional[Path]) -> tuple[Optional[Path], str]:
    """Write the run's HTML report; (path, "") or (None, why not) when the results store cannot be read."""
    from gpuval.errors import GpuvalError
    from gpuval.report import write_report

    try:
        return write_report(run_id=run_id, output=target), ""
    except GpuvalError as exc:
        return None, str(exc)


def validate(
    nprocs: Optional[int] = typer.Option(None, "--nprocs", help="Local ranks [default: one per GPU, 2 without GPUs]."),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes",
                                           help="Largest all_reduce size [GPU: the SKU baseline's size or 1G; CPU 64M]."),
    sku: Optional[str] = sku_option(),
    baseline: Optional[List[Path]] = typer.Option(None, "--baseline", help="Your own baseline YAML (repeatable)."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
    report: Optional[Path] = typer.Option(None, "--report", help="Write the HTML report here "
                                          "[default: reports/report-RUN.html in gpuval's data directory]."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (verdict, checks, sweep, report)."),
) -> None:
    """Validate this machine: every health check, then the all_reduce sweep, judged against the SKU's baseline,
    then an HTML report."""
    from gpuval.cli.bench import make_config
    from gpuval.cli.health import run_health
    from gpuval.collectives.sizes import format_size, parse_size
    from gpuval.node.gpus import visible_gpu_count
    from gpuval.results import new_run_id
    from gpuval.workloads.collective import BenchRequest, default_nprocs, run_local
    from gpuval.workloads.validate import judge_sweep, sweep_top
    from gpuval.workloads.validate import verdict as judge_run

    writable_file(results)
    writable_file(report)
    run_id = new_run_id()
    say = (lambda *_a, **_k: None) if as_json else console.print
    health = run_health(sku, None, baseline or [], None, results, repeats=3, quiet=as_json, run_id=run_id)
    base = health.ctx.baseline
    if base is None:
        say(f"  no baseline for SKU {health.ctx.sku or 'unknown'}: the sweep is reported, not judged")
    gpus = visible_gpu_count()
    top = parse_size(maxbytes) if maxbytes else sweep_top(base, gpus)
    cfg = make_config(collective="all_reduce", min_bytes=8, max_bytes=top, step_factor=2)
    ranks = nprocs or default_nprocs()
    say(f"\n[bold]gpuval validate[/]: all_reduce 8 B .. {format_size(top)} over {ranks} local ranks "
        f"({'nccl, ' + str(gpus) + ' GPUs' if gpus else 'gloo on CPU, no NVIDIA GPU found'})")
    req = BenchRequest(config=cfg, run_id=run_id, results_path=str(results) if results else None, sku=health.ctx.sku,
                       quiet=as_json)
    table, code = run_local(req, ranks)
    if not table.rows:
        raise typer.Exit(EXIT_CANNOT_RUN)  # run_local has said why
    wrong = table.total_wrong()
    sweep_status, sweep_line = judge_sweep(table, base)
    verdict, basis = judge_run(wrong, sweep_status, health.results)
    path, why_not = _report(run_id, report)
    if as_json:
        peak, last = table.peak(), table.rows[-1]
        print_json({
            "run_id": run_id, "verdict": verdict.value, "basis": basis, "sku": health.ctx.sku,
            "health": [r.to_json() for r in health.results],
            "sweep": {"status": sweep_status.value, "reason": sweep_line, "wrong_elements": wrong,
                      "peak_busbw": peak.best_busbw(), "peak_size": peak.size,
                      "largest_size": last.size, "busbw_at_largest": last.best_busbw()},
            "report": str(path) if path else None,
        })
    else:
        style = {"fail": "bold red", "error": "bold yellow", "pass": "bold green"}[verdict.value]
        lines = _summary_lines(table, wrong, sweep_status, sweep_line, health)
        console.print(f"\n[{style}]{verdict.value.upper()}[/] " + "\n".join(lines), soft_wrap=True)
        if basis:
            console.print(f"  verdict: {basis}", soft_wrap=True)
        console.print(f"  report: {path}" if path else f"  report not written: {why_not}", soft_wrap=True)
    raise typer.Exit({"fail": EXIT_FAILED, "error": EXIT_CANNOT_RUN}.get(verdict.value, code))


def register(app: typer.Typer) -> None:
    app.command("validate")(handle_errors(validate))
