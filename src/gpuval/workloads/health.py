"""The `health` workload: `gpuval health --json` once on every node of a job; its output is Result records."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.printed import printed_results
from gpuval.workloads.registry import ResultContext, Workload, WorkloadRequest, base_spec, register


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node; the workload's arguments go to `gpuval health` (e.g. `--check gpu`)."""
    if req.use:
        raise UsageError("the health workload has no --use variants")
    return base_spec(req, ["gpuval", "health", "--json", *req.args], Launcher.MPI, procs_per_node=1)


def results(output: str, ctx: ResultContext) -> list[Result]:
    """Result records printed by `gpuval health --json` (a list, or an object with a `results` list)."""
    return printed_results(output, ctx)


register(Workload(name="health", help="Node health checks (gpuval health --json) on every node.",
                  build=build, results=results))
