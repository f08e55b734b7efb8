"""The `health` workload: `gpuval health` once on every node of a job; its output is Result records, the same
representation `gpuval health --json` prints."""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.base import (
    NodeLines, Output, ResultContext, Workload, WorkloadRequest, base_spec, baseline_args, printed_results,
)
from gpuval.workloads.node_output import NodeRead, node_results


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node; the workload's arguments go to `gpuval health` (e.g. `--check gpu`).

    `--results /dev/stdout` puts each check's Result record (built on its node, with its hostname) on the job's
    output as soon as the check ends, a node that dies mid-suite keeping what it measured. The launcher forwards
    each node's output in 1 KiB messages into one file, so a longer record is written as pieces that each fit one
    (results/pieces.py): nodes writing at the same moment cannot tear each other's records. The reader joins them
    back. The submitting side stores the records, so the job itself writes no results database, each with the node
the engine says printed it (`attributed`: Slurm labels every task's lines), never the host a record names.

    On Slurm the one process per node is not bound to a core (`cpu_bind=none`): it starts the node's measuring
    ranks itself. With `--drain` (each node drains or resumes itself, as SLURMD_NODENAME, with gpuval's reason)
    the job takes its nodes whole (`exclusive`, whatever --opt says): a verdict that drains a node must come from
    measurements no other job shared. `--node` (one node's name) is refused on a job of several nodes: every
    node would act on that one."""
    if req.use:
        raise UsageError("the health workload has no --use variants")
    if req.nodes > 1 and any(arg == "--node" or arg.startswith("--node=") for arg in req.args):
        raise UsageError(f"health workload: --node names one node, and this job runs on {req.nodes} nodes: drop "
                         "--node (each node acts as itself, by the name its scheduler gives it)")
    command = ["gpuval", "health", "--results", "/dev/stdout", *baseline_args(req), *req.args]
    slurm: dict[str, object] = {"cpu_bind": "none", **({"exclusive": True} if "--drain" in req.args else {})}
    extras = {**req.extras, "slurm": {**slurm, **req.extras.get("slurm", {})}}
    spec = base_spec(req.model_copy(update={"extras": extras}), command, Launcher.MPI, procs_per_node=1)
    return spec.model_copy(update={"attributed": True})  # each node's records are read as that node's


def read(output: Output, ctx: ResultContext) -> list[Result]:
    """The Result records on the job's output: one JSON line per check from every node."""
    return printed_results(output, ctx, kind="health")


def read_nodes(lines: NodeLines, ctx: ResultContext) -> NodeRead:
    """The records each node printed of itself, each with the node that printed it (`node_results`): what
    `submit health --wait` and `jobs wait` store."""
    return node_results(lines, ctx, kind="health")


WORKLOAD = Workload(name="health", help="Node health checks (gpuval health) on every node.", build=build, read=read,
                    read_nodes=read_nodes)
