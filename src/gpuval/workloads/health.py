"""The `health` workload: `gpuval health --json` once on every node of a job; its output is Result records."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.printed import printed_results
from gpuval.workloads.registry import ResultContext, Workload, WorkloadRequest, base_spec, register


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node; the workload's arguments go to `gpuval health` (e.g. `--check gpu`).

    `--json` prints check results, which say nothing of the node they ran on; `--results /dev/stdout` puts each
    check's Result record (with its hostname) on the job's output as one line, as soon as the check ends: what the
    reader reads back. The submitting side stores the records, so the job itself writes no results database."""
    if req.use:
        raise UsageError("the health workload has no --use variants")
    command = ["gpuval", "health", "--json", "--results", "/dev/stdout", *req.args]
    return base_spec(req, command, Launcher.MPI, procs_per_node=1)


def results(output: str, ctx: ResultContext) -> list[Result]:
    """The Result records on the job's output: one JSON line per check from every node (`--results /dev/stdout`);
    `--json`'s check results, which are no Result records, are skipped."""
    return printed_results(output, ctx, kind="health")


register(Workload(name="health", help="Node health checks (gpuval health --json) on every node.",
                  build=build, results=results))
