"""The `health` workload: `gpuval health --json` once on every node of a job; its output is Result records."""

from __future__ import annotations

import json

from pydantic import ValidationError

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.registry import ResultContext, Workload, WorkloadRequest, base_spec, register


def build(req: WorkloadRequest) -> JobSpec:
    """One process per node; the workload's arguments go to `gpuval health` (e.g. `--check gpu`).

    `--json` prints check results, which say nothing of the node they ran on; `--results /dev/stdout` puts each
    check's Result record (with its hostname) on the job's output as one line, as soon as the check ends: what the
    reader reads back. The submitting side stores the records, so the job itself writes no results database."""
    if req.use:
        raise UsageError("the health workload has no --use variants")
    command = ["gpuval", "health", "--json", "--results", "/dev/stdout", *req.args]
    return base_spec(req, command, Launcher.MPI, procs_per_node=1, env={"GPUVAL_DB": "none"})


def _json_documents(text: str) -> list[object]:
    """Every JSON array or object that starts a line of the output (other lines are logs)."""
    decoder = json.JSONDecoder()
    docs: list[object] = []
    offset, skip_to = 0, 0
    for line in text.splitlines(keepends=True):
        if offset >= skip_to and line[:1] in "[{":
            try:
                doc, skip_to = decoder.raw_decode(text, offset)
                docs.append(doc)
            except json.JSONDecodeError:
                pass
        offset += len(line)
    return docs


def results(output: str, ctx: ResultContext) -> list[Result]:
    """The Result records on the job's output (JSON Lines from every node; a list, or an object with a `results`
    list); `--json`'s check results, which are no Result records, are skipped."""
    found: list[Result] = []
    for doc in _json_documents(output):
        items = doc if isinstance(doc, list) else doc.get("results", [doc]) if isinstance(doc, dict) else []
        for item in items if isinstance(items, list) else []:
            try:
                record = Result.model_validate(item)
            except ValidationError:
                continue
            record.where.job_id = ctx.job_id
            record.where.engine = ctx.engine
            found.append(record)
    return found


register(Workload(name="health", help="Node health checks (gpuval health --json) on every node.",
                  build=build, results=results))
