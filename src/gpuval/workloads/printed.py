"""Read back the Result records a job's `gpuval ... --json` printed into its output, among other log lines."""

from __future__ import annotations

import json

from pydantic import ValidationError

from gpuval.results import Result
from gpuval.workloads.registry import ResultContext


def json_documents(text: str) -> list[object]:
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


def printed_results(output: str, ctx: ResultContext, kind: str | None = None) -> list[Result]:
    """Result records printed as JSON (one record, a list, or an object with a `results` list), of `kind` when
    given, stamped with the job's engine and id."""
    found: list[Result] = []
    for doc in json_documents(output):
        items = doc if isinstance(doc, list) else doc.get("results", [doc]) if isinstance(doc, dict) else []
        for item in items if isinstance(items, list) else []:
            try:
                record = Result.model_validate(item)
            except ValidationError:
                continue
            if kind is not None and record.kind != kind:
                continue
            record.where.job_id = ctx.job_id
            record.where.engine = ctx.engine
            found.append(record)
    return found
