"""The `burn` workload: `gpuval burn` once on every node of a job; its output is the burn's Result record (kind
"health", name "burn"), one JSON line per node, which the reader reads back."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.base import ResultContext, Workload, WorkloadRequest, base_spec, baseline_args, printed_results


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node (it loads every GPU of its node); the workload's arguments go to `gpuval burn`
    (e.g. `--duration 5m`)."""
    if req.use:
        raise UsageError("the burn workload has no --use variants")
    command = ["gpuval", "burn", "--results", "/dev/stdout", *baseline_args(req), *req.args]
    return base_spec(req, command, Launcher.MPI, procs_per_node=1)


def read(output: str, ctx: ResultContext) -> list[Result]:
    """The burn records on the job's output: one JSON line from every node."""
    return [r for r in printed_results(output, ctx, kind="health") if r.name == "burn"]


WORKLOAD = Workload(name="burn", help="GPU burn (gpuval burn): every GPU under load, clocks and results checked.",
                    build=build, read=read)
