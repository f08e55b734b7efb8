"""`gpuval validate`: the main job. This machine, every check that applies, a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors
from gpuval.errors import EXIT_FAILED


def validate(
    nprocs: Optional[int] = typer.Option(None, "--nprocs", help="Local ranks [default: one per GPU, 2 without GPUs]."),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes", help="Largest all_reduce size [GPU 1G, CPU 64M]."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Validate this machine: the all_reduce sweep over its local ranks, then a verdict."""
    from gpuval.cli.bench import make_config
    from gpuval.collectives.sizes import format_size, parse_size
    from gpuval.node.gpus import visible_gpu_count
    from gpuval.results import new_run_id
    from gpuval.workloads.collective import BenchRequest, default_nprocs, run_local

    gpus = visible_gpu_count()
    top = parse_size(maxbytes) if maxbytes else (1024**3 if gpus else 64 * 1024**2)
    cfg = make_config(collective="all_reduce", min_bytes=8, max_bytes=top, step_factor=2)
    ranks = nprocs or default_nprocs()
    console.print(f"[bold]gpuval validate[/]: all_reduce 8 B .. {format_size(top)} over {ranks} local ranks "
                  f"({'nccl, ' + str(gpus) + ' GPUs' if gpus else 'gloo on CPU, no NVIDIA GPU found'})")
    req = BenchRequest(config=cfg, run_id=new_run_id(), results_path=str(results) if results else None)
    table, code = run_local(req, ranks)
    peak, last = table.peak(), table.rows[-1] if table.rows else None
    if peak is None or last is None:
        console.print("[bold red]ERROR[/] the sweep measured nothing")
        raise typer.Exit(2)
    wrong = table.total_wrong()
    verdict = "[bold red]FAIL[/]" if wrong else "[bold green]PASS[/]"
    console.print(
        f"\n{verdict} all_reduce: peak busbw {peak.best_busbw():.2f} GB/s at {format_size(peak.size)}, "
        f"{last.best_busbw():.2f} GB/s at the largest size {format_size(last.size)}, {wrong} wrong elements"
    )
    console.print("  (no baseline for this machine yet: figures are reported, not judged)")
    raise typer.Exit(EXIT_FAILED if wrong else code)


def register(app: typer.Typer) -> None:
    app.command("validate")(handle_errors(validate))
