"""`gpuval submit WORKLOAD --on ENGINE`: render a workload's job for an engine, send it, and (--wait) read back
its results. Words after `--` go to the workload: `gpuval submit nccl --on slurm -- all_reduce -b 8 -e 1G -f 2`.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from gpuval.cli._common import (
    ON_HELP, OPT_HELP, RESULTS_HELP, baseline_files, baseline_option, console, handle_errors, key_values,
    parse_options, print_json, profile_option,
)
from gpuval.errors import UsageError


def submit(
    workload: str = typer.Argument(..., help="nccl, health, burn, lammps or train (see `gpuval submit --help`)."),
    args: Optional[List[str]] = typer.Argument(None, help="After `--`: the workload's own arguments."),
    on: str = typer.Option(..., "--on", help=ON_HELP),
    nodes: int = typer.Option(1, "--nodes", "-N", help="Nodes."),
    procs_per_node: Optional[int] = typer.Option(None, "--procs-per-node", help="Processes per node [default: "
                                                 "one per GPU, at least one]."),
    gpus_per_node: int = typer.Option(0, "--gpus-per-node", help="GPUs per node."),
    cpus_per_proc: Optional[int] = typer.Option(None, "--cpus-per-proc", help="CPU cores per process."),
    sku: Optional[str] = typer.Option(None, "--sku", help="VM size: picks the network preset (NCCL/UCX settings) and "
                                      "the baseline."),
    baseline: Optional[List[Path]] = baseline_option(),
    profile: Optional[Path] = profile_option(),
    image: Optional[str] = typer.Option(None, "--image", help="Container image [default: none: run the submitting "
                                        "environment's gpuval (local, Slurm with a shared file system)]."),
    name: Optional[str] = typer.Option(None, "--name", help="Job name [default: gpuval-WORKLOAD]."),
    env: Optional[List[str]] = typer.Option(None, "--env", "-x", help="NAME=VALUE for every process (repeat); "
                                            "overrides the preset."),
    mount: Optional[List[str]] = typer.Option(None, "--mount", help="SRC:DST[:ro] into the container (repeat)."),
    time_limit: Optional[int] = typer.Option(None, "--time", help="Time limit in minutes."),
    shm_size: Optional[str] = typer.Option(None, "--shm-size", help="/dev/shm size in the container, e.g. 64g."),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="mpi, torchrun or none [default: the "
                                           "workload's]."),
    use: Optional[str] = typer.Option(None, "--use", help="Program variant: --use nccl-tests for the nccl workload."),
    opt: Optional[List[str]] = typer.Option(None, "--opt", help=OPT_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be sent; send nothing."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the rendered files into this folder."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the job to end and read its results."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="With --wait: give up after this many seconds."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: the rendered files, the job id, or with "
                                 "--wait the status and Result records."),
    results: Optional[Path] = typer.Option(None, "--results", help=RESULTS_HELP),
) -> None:
    """Run a workload on an engine: this machine, Slurm, Kubernetes or Azure ML. --baseline / --profile judge what
    it measures: the nccl sweep's size, and the health and burn checks on the nodes (which read the same files)."""
    from pydantic import ValidationError

    from gpuval.cli.render import print_outcome
    from gpuval.engines import get_engine
    from gpuval.engines.base import check_timeout
    from gpuval.engines.spec import Launcher, Mount
    from gpuval.errors import validation_error
    from gpuval.results import new_run_id
    from gpuval.workloads.base import WorkloadRequest, collect, get_workload

    chosen = get_workload(workload)
    engine = get_engine(on, parse_options(opt))
    try:
        req = WorkloadRequest(
            workload=workload, name=name, nodes=nodes, procs_per_node=procs_per_node, gpus_per_node=gpus_per_node,
            cpus_per_proc=cpus_per_proc, image=image, sku=sku, env=key_values(env, "--env"),
            mounts=[Mount.parse(m) for m in mount or []], time_limit_min=time_limit, shm_size=shm_size,
            launcher=Launcher(launcher) if launcher else None, use=use, args=list(args or []), run_id=new_run_id(),
            baselines=[str(p) for p in baseline_files(baseline, profile)],
        )
    except ValidationError as exc:
        raise validation_error(exc, with_field=False) from None
    except ValueError as exc:  # Mount.parse, Launcher(...)
        raise UsageError(str(exc)) from None
    spec = chosen.build(req)
    if wait:
        check_timeout(timeout)  # before anything is sent
    if dry_run or output:
        rendered = engine.dryrun(spec)
        for note in rendered.notes:
            typer.echo(f"note: {note}", err=True)
        written = rendered.write(output) if output else []
        if dry_run:  # what is shown hides the job's secrets (--output writes them, to files only their owner reads)
            if as_json:
                print_json({"engine": engine.name, "files": rendered.shown, "written": [str(p) for p in written]})
            else:
                typer.echo(rendered.shown_text(), nl=False)
            return
        for path in written:
            console.print(f"[dim]wrote {path}[/]")
    job_id = engine.submit(spec)
    if not wait:
        if as_json:
            print_json({"engine": engine.name, "job_id": job_id, "run_id": req.run_id})
        else:
            console.print(f"submitted {engine.name} job [bold]{job_id}[/] (run {req.run_id}); follow it with "
                          f"`gpuval jobs status {job_id} --on {engine.name}`")
        return
    if not as_json:
        console.print(f"submitted {engine.name} job [bold]{job_id}[/]; waiting for it to end")
    outcome = collect(engine, job_id, engine.wait(job_id, timeout), results)
    print_outcome(outcome, console, as_json)
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("submit", no_args_is_help=True)(handle_errors(submit))
