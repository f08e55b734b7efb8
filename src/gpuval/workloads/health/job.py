"""The `health` workload: `gpuval health` once on every node of a job; its output is Result records, the same
representation `gpuval health --json` prints."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.base import Output, ResultContext, Workload, WorkloadRequest, base_spec, printed_results


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node; the workload's arguments go to `gpuval health` (e.g. `--check gpu`).

    `--results /dev/stdout` puts each check's Result record (built on its node, with its hostname) on the job's
    output as one line, one write, as soon as the check ends: nodes sharing one output file cannot interleave
    inside a record, and a node that dies mid-suite keeps what it measured. The reader reads those lines back. The
    submitting side stores the records, so the job itself writes no results database."""
    if req.use:
        raise UsageError("the health workload has no --use variants")
    command = ["gpuval", "health", "--results", "/dev/stdout", *req.args]
    return base_spec(req, command, Launcher.MPI, procs_per_node=1)


def read(output: Output, ctx: ResultContext) -> list[Result]:
    """The Result records on the job's output: one JSON line per check from every node."""
    return printed_results(output, ctx, kind="health")


WORKLOAD = Workload(name="health", help="Node health checks (gpuval health) on every node.", build=build, read=read)
