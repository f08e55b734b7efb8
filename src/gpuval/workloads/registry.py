"""Workloads that run as jobs on an engine: each turns a `WorkloadRequest` into a `JobSpec`, and reads the
job's output back into Result records.

Adding a workload is one module with one `Workload` and a `register()` call (workloads/lammps/job.py is a short
example):

    def build(req: WorkloadRequest) -> JobSpec:        # req.args: the words after `--` on the command line
        return base_spec(req, lammps_job_command(parse_args(req.args)), Launcher.MPI, procs_per_node=1)

    def results(output: str, ctx: ResultContext) -> list[Result]:   # parse the job's whole output
        return printed_results(output, ctx, kind="lammps")

    register(Workload(name="lammps", help="LAMMPS benchmark ...", build=build, results=results))

and its module name in `_MODULES` below. `build` raises UsageError on bad input (before anything is sent);
`results` returns [] when the output holds nothing it can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import Callable

from pydantic import BaseModel, Field

from gpuval.engines.presets import preset_for
from gpuval.engines.spec import JobSpec, Launcher, Mount
from gpuval.errors import UsageError
from gpuval.results import Result

_MODULES = ("gpuval.workloads.nccl", "gpuval.workloads.health", "gpuval.workloads.lammps.job",
            "gpuval.workloads.train.job")


class WorkloadRequest(BaseModel):
    """What the user asked for on `gpuval submit`: sizes, where, and the workload's own words."""

    workload: str
    name: str | None = None
    nodes: int = Field(1, ge=1)
    procs_per_node: int | None = Field(None, ge=1, description="Default: the workload's choice.")
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_proc: int | None = Field(None, ge=1)
    image: str | None = None
    sku: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[Mount] = Field(default_factory=list)
    time_limit_min: int | None = Field(None, ge=1)
    shm_size: str | None = None
    launcher: Launcher | None = Field(None, description="Default: the workload's choice.")
    use: str | None = Field(None, description="Program variant, e.g. nccl-tests for the nccl workload.")
    args: list[str] = Field(default_factory=list, description="The workload's own arguments.")
    run_id: str = ""
    extras: dict[str, dict] = Field(default_factory=dict)


@dataclass(frozen=True)
class ResultContext:
    """What a results reader knows about the job whose output it reads."""

    spec: JobSpec
    engine: str
    job_id: str
    run_id: str
    started: datetime


@dataclass(frozen=True)
class Workload:
    """One workload: its name, help line, spec builder and output reader."""

    name: str
    help: str
    build: Callable[[WorkloadRequest], JobSpec]
    results: Callable[[str, ResultContext], list[Result]]


_REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    """Add a workload (called by each workload module at import)."""
    _REGISTRY[workload.name] = workload
    return workload


def workloads() -> dict[str, Workload]:
    """Every workload, by name."""
    for module in _MODULES:
        import_module(module)
    return dict(_REGISTRY)


def get_workload(name: str) -> Workload:
    """One workload; an unknown name is a one-line error listing the known ones."""
    known = workloads()
    if name not in known:
        raise UsageError(f"unknown workload {name!r}; choose one of: {', '.join(sorted(known))}")
    return known[name]


def base_spec(req: WorkloadRequest, command: list[str], launcher: Launcher, procs_per_node: int,
              env: dict[str, str] | None = None) -> JobSpec:
    """The JobSpec every workload starts from: the request's sizes, image, SKU preset, env and mounts. Inside a
    job gpuval keeps its records in the job's folder and writes no results database: the submitting side reads the
    job's output and stores them (once, and never SQLite over a shared file system)."""
    merged = {"GPUVAL_RESULTS": "gpuval-results.jsonl", "GPUVAL_DB": "none", **(env or {})}
    if req.run_id:
        merged["GPUVAL_RUN_ID"] = req.run_id
    merged.update(req.env)  # the user's --env wins over everything
    try:
        return JobSpec(
            name=req.name or f"gpuval-{req.workload}",
            command=command,
            image=req.image,
            env=merged,
            nodes=req.nodes,
            procs_per_node=req.procs_per_node or procs_per_node,
            gpus_per_node=req.gpus_per_node,
            cpus_per_proc=req.cpus_per_proc,
            launcher=req.launcher or launcher,
            network=preset_for(req.sku) if req.sku else None,
            shm_size=req.shm_size,
            mounts=req.mounts,
            time_limit_min=req.time_limit_min,
            workload=req.workload,
            extras=req.extras,
        )
    except ValueError as exc:  # pydantic's ValidationError: keep its first message
        errors = getattr(exc, "errors", None)
        message = errors()[0]["msg"].removeprefix("Value error, ") if errors else str(exc)
        raise UsageError(message) from None
