"""`gpuval bench COLLECTIVE`: nccl-tests' flags and output; NCCL called through nccl4py on GPUs, torch.distributed
elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuval.cli._common import RESULTS_HELP, handle_errors, writable_file


def bench(
    collective: str = typer.Argument(..., help="all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, "
                                     "sendrecv, gather, scatter."),
    minbytes: str = typer.Option("32M", "-b", "--minbytes", help="Smallest message size (K, M, G suffixes)."),
    maxbytes: str = typer.Option("32M", "-e", "--maxbytes", help="Largest message size."),
    stepfactor: int = typer.Option(1, "-f", "--stepfactor", help="Multiply the size by this between steps."),
    stepbytes: str = typer.Option("1M", "-i", "--stepbytes", help="Add this to the size between steps (when -f is 1)."),
    iters: int = typer.Option(20, "-n", "--iters", help="Timed iterations per size."),
    warmup: int = typer.Option(5, "-w", "--warmup_iters", help="Untimed warm-up iterations per size."),
    agg: int = typer.Option(1, "-m", "--agg_iters", help="Operations aggregated per timed iteration."),
    check: int = typer.Option(1, "-c", "--check", help="Check results this many times per size (0: no check)."),
    op: str = typer.Option("sum", "-o", "--op", help="Reduction: sum, prod, min, max, avg."),
    datatype: str = typer.Option("float", "-d", "--datatype", help="float, half, bfloat16, double, int32, int64, int8, uint8."),
    root: int = typer.Option(0, "-r", "--root", help="Root rank of broadcast and reduce."),
    average: int = typer.Option(1, "-a", "--average", help="Time reported: 0 rank 0, 1 average, 2 minimum, 3 maximum."),
    graph: int = typer.Option(0, "-G", "--cudagraph", help="Launch the iterations as a CUDA graph this many times (GPU)."),
    blocking: int = typer.Option(0, "-z", "--blocking", help="Wait for each collective: 0 no, 1 wait and barrier per "
                                 "launch, 2 wait per launch, 3 per iteration (nccl-tests' -z)."),
    cycles: int = typer.Option(1, "-N", "--run_cycles", help="Run the whole sweep this many times, printing a row "
                                "per size per cycle (per-cycle samples, as nccl-tests -N)."),
    timeout: float = typer.Option(120.0, "-T", "--timeout", help="Seconds a collective may take before a rank gives "
                                  "up (a killed or stopped local rank is named within seconds, whatever this says)."),
    nprocs: Optional[int] = typer.Option(None, "--nprocs", help="Local ranks to start [default: one per GPU, 2 without GPUs]; "
                                         "without it inside torchrun/mpirun/srun/Azure ML/Kubeflow, run as one rank of that job."),
    backend: str = typer.Option("auto", "--backend", help="auto (nccl on GPUs, gloo on CPU), nccl or gloo."),
    via: str = typer.Option("auto", "--via", help="What calls the collectives: auto (NCCL through nccl4py's bindings "
                            "on GPUs where it loads, else torch.distributed), nccl4py, or torch."),
    json_out: Optional[Path] = typer.Option(None, "--json", "-J", help="Write nccl-tests' JSON document (-J) to this file."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Measure a collective across ranks and print nccl-tests' table (exit 1 on any wrong element)."""
    from gpuval.collectives.sizes import parse_size
    from gpuval.results import new_run_id
    from gpuval.workloads.collective.run import BenchRequest, bench_config, run_bench

    cfg = bench_config(
        collective=collective, min_bytes=parse_size(minbytes), max_bytes=parse_size(maxbytes), step_factor=stepfactor,
        step_bytes=parse_size(stepbytes), iters=iters, warmup=warmup, agg_iters=agg, check=check, op=op,
        dtype=datatype, root=root, average=average, graph=graph, blocking=blocking, backend=backend,
        timeout_s=timeout, cycles=cycles, via=via,
    )
    writable_file(json_out)
    writable_file(results)
    req = BenchRequest(config=cfg, run_id=new_run_id(), json_path=str(json_out) if json_out else None,
                       results_path=str(results) if results else None)
    raise typer.Exit(run_bench(req, nprocs))


def register(app: typer.Typer) -> None:
    app.command("bench", no_args_is_help=True)(handle_errors(bench))
