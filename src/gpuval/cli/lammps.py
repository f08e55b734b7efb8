"""`gpuval lammps`: LAMMPS' standard benchmarks under MPI, a strong-scaling sweep with parallel efficiency."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gpuval.cli._common import RESULTS_HELP, console, handle_errors, parse_ranks, print_json


def lammps(
    benchmark: str = typer.Option("lj", "--benchmark", "-b", help="lj (bench/in.lj, LJ melt) or chute (granular flow)."),
    ranks: Optional[str] = typer.Option(None, "--ranks", "-r", help="MPI rank counts to sweep, e.g. 1,2,4 [default: "
                                        "powers of two up to the cores, or the GPUs with --accel]; the first is the "
                                        "efficiency baseline. Without it inside mpirun/srun/Azure ML, run as one rank."),
    scale: str = typer.Option("1", "--scale", help="Box copies for weak scaling: N (8 -> 2x2x2) or AxBxC."),
    accel: str = typer.Option("none", "--accel", help="none (CPU), gpu (-sf gpu -pk gpu N) or kokkos (-k on g N -sf kk)."),
    gpus: int = typer.Option(1, "--gpus", help="GPUs per node given to the accelerator package."),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Keep inputs and log.lammps files here "
                                           "[default: a temporary directory]."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds one run may take."),
    as_json: bool = typer.Option(False, "--json", help="Print the Result records as JSON."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Run a LAMMPS benchmark at one or more MPI rank counts and report timesteps/s and parallel efficiency."""
    from gpuval.results import new_run_id
    from gpuval.workloads.lammps.inputs import parse_scale
    from gpuval.workloads.lammps.run import LammpsConfig, run_lammps

    cfg = LammpsConfig(benchmark=benchmark, scale=parse_scale(scale), accel=accel, gpus=gpus)
    on_record = (lambda _r: None) if as_json else _print_progress
    records = run_lammps(cfg, parse_ranks(ranks) if ranks else None, new_run_id(), workdir, results, timeout,
                         on_record)
    if records is None:  # a rank other than 0 of an engine's job: rank 0 reports for the job
        return
    if as_json:
        print_json([r.model_dump(mode="json") for r in records])
    else:
        _print_table(records)


def _print_progress(record) -> None:
    console.print(f"[dim]{record.params['ranks']} ranks: {record.metric('timesteps_per_s').value:.2f} timesteps/s[/]")


def _print_table(records) -> None:
    from rich.table import Table

    first = records[0]
    data = first.data
    table = Table(title=f"LAMMPS {first.name} ({data.atoms:,} atoms, {data.steps} steps, {data.units} units, "
                        f"LAMMPS {data.version})")
    for column in ("ranks", "loop s", "timesteps/s", "Matom-step/s", "speed-up", "efficiency", "status"):
        table.add_column(column, justify="right")
    for r in records:
        speedup, eff = r.metric("speedup"), r.metric("parallel_efficiency")
        table.add_row(
            str(r.params["ranks"]), f"{r.metric('loop_time_s').value:.3f}", f"{r.metric('timesteps_per_s').value:.2f}",
            f"{r.metric('atom_steps_per_s').value / 1e6:.3f}", f"{speedup.value:.2f}" if speedup else "",
            f"{eff.value:.0%}" if eff else "", r.status.value + (f": {r.reason}" if r.reason else ""),
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("lammps")(handle_errors(lammps))
