"""`gpuval train`: the reference data-parallel training job (small ResNet, synthetic images, torch DDP)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, parse_ranks, print_json


def train(
    nprocs: Optional[str] = typer.Option(None, "--nprocs", "-n", help="Ranks to start here, or sizes to sweep "
                                         "(1,2: scaling efficiency against the first) [default: 2]. Without it "
                                         "inside torchrun/srun/mpirun/Azure ML/Kubeflow, run as one rank of that job."),
    launcher: str = typer.Option("torchrun", "--launcher", help="torchrun or accelerate (accelerate launch --multi_gpu)."),
    steps: int = typer.Option(30, "--steps", help="Training steps (the first 3 are not timed)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Images per rank per step."),
    image_size: int = typer.Option(32, "--image-size", help="Height and width of the synthetic images."),
    backend: str = typer.Option("auto", "--backend", help="auto (nccl on GPUs, gloo on CPU), nccl or gloo."),
    step_report: int = typer.Option(10, "--step-report", help="Each rank prints a step record (gpuval.hooks: its "
                                    "compute and collective wait, read by `gpuval jobs diagnose`) every N steps; "
                                    "0: none."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds one job may take."),
    as_json: bool = typer.Option(False, "--json", help="Print the Result records as JSON."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Train a small CNN data-parallel and report samples/s, step times, loss, and scaling efficiency."""
    from gpuval.errors import validation_error
    from gpuval.results import new_run_id
    from gpuval.results.verdict import node_verdict
    from gpuval.workloads.rank_starter import leave
    from gpuval.workloads.train.run import run_train
    from gpuval.workloads.train.worker import TrainConfig

    try:
        cfg = TrainConfig(steps=steps, batch_size=batch_size, image_size=image_size, backend=backend,
                          step_report=step_report, timeout_s=timeout)
    except ValidationError as exc:
        raise validation_error(exc, as_flag=True) from None
    on_record = (lambda _r: None) if as_json else _print_progress
    records, in_job = run_train(cfg, parse_ranks(nprocs) if nprocs else None, launcher, new_run_id(), results,
                                timeout, on_record)
    if as_json:
        print_json([r.model_dump(mode="json") for r in records])
    else:
        _print_table(records)
    code = node_verdict(records).exit_code  # THE node verdict's exit contract
    if in_job:  # a rank of an engine's job: leave without torch's teardown (see workloads.rank_starter.leave)
        leave(code)
    raise typer.Exit(code)


def _print_progress(record) -> None:
    console.print(f"[dim]{record.params['launcher']}, {int(record.metric('world_size').value)} ranks: "
                  f"{record.metric('samples_per_s').value:.1f} samples/s[/]")


def _print_table(records) -> None:
    from rich.table import Table

    first = records[0]
    table = Table(title=f"SmallResNet data-parallel, {first.params['launcher']}, {first.params['backend']} on "
                        f"{first.data.device}, {first.params['batch_size']} images/rank, {first.params['steps']} steps")
    transports = any(r.data.nccl_transport for r in records)
    columns = ["ranks", "samples/s", "step p50 s", "step p95 s", "loss", "efficiency"]
    for column in columns + (["transport"] if transports else []) + ["status"]:
        table.add_column(column, justify="right")
    for r in records:
        eff = r.metric("scaling_efficiency")
        row = [
            str(int(r.metric("world_size").value)), f"{r.metric('samples_per_s').value:.1f}",
            f"{r.metric('step_time_p50_s').value:.4f}", f"{r.metric('step_time_p95_s').value:.4f}",
            f"{r.metric('loss_first').value:.3f}->{r.metric('loss_last').value:.3f}", f"{eff.value:.0%}" if eff else "",
        ]
        row += [r.data.nccl_transport or "-"] if transports else []
        table.add_row(*row, r.status.value + (f": {r.reason}" if r.reason else ""))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("train")(handle_errors(train))
