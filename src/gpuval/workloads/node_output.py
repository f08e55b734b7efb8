"""A job's records read per node: each with the node the engine says printed it (`Engine.node_lines`), never the
host, run or time the record names (workloads whose nodes print records of themselves: health, burn)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Union

from gpuval.results import Result
from gpuval.workloads.base import DocumentReader, NodeLines, ResultContext, results_of

CLOCK_SKEW = timedelta(minutes=5)  # how far a node's clock may be from this one's (the exporter's bound too)


@dataclass
class NodeRead:
    """The records a job's nodes printed, each stamped as read (`node_results`), and what was not taken."""

    results: list[Result] = field(default_factory=list)
    unplaced: int = 0  # records on lines the engine tied to no node (the launcher's own, a batch script's)
    retimed: int = 0  # records dated outside the job's time, stamped with when they were read
    repeated: int = 0  # a record id printed twice (a line and a list): kept once

    def note(self) -> str:
        """What was not taken as printed, for people ("" when everything was)."""
        parts = [f"{n} {what}" for n, what in (
            (self.unplaced, "record(s) printed on lines no node of the job printed: dropped"),
            (self.retimed, "record(s) dated outside the job's run: dated when read")) if n]
        return "; ".join(parts)


def node_results(lines: NodeLines, ctx: ResultContext, kind: str | None = None) -> NodeRead:
    """Result records a job's nodes printed of themselves, read from each node's own lines (a piece or a
    half-written document of one node never joins another's): a record's host is the node the engine says printed
    it (its own `where.hostname` is a claim, and a node speaks only for itself), its run id the job's, its time its
    own only while it lies within the job's run (submitted, less CLOCK_SKEW, to now, plus it), else when it was
    read. Lines of no node are dropped (`NodeRead.unplaced`)."""
    readers: dict[Union[str, None], DocumentReader] = {}
    found = NodeRead()
    seen: set[tuple[str, str]] = set()
    for node, raw in lines:
        reader = readers.setdefault(node, DocumentReader())
        for doc in reader.feed(raw if raw.endswith("\n") else raw + "\n"):
            for record in results_of(doc, kind):
                if node is None:
                    found.unplaced += 1
                    continue
                if (node, record.id) in seen:
                    found.repeated += 1
                    continue
                seen.add((node, record.id))
                found.results.append(_as_read(record, node, ctx, found))
    return found


def _as_read(record: Result, node: str, ctx: ResultContext, found: NodeRead) -> Result:
    """The record as the submitting side knows it: the node, the job, the engine, a plausible time."""
    now = datetime.now(timezone.utc)
    where = record.where.model_copy(update={"hostname": node, "job_id": ctx.job_id, "engine": ctx.engine})
    started, finished = record.started_at, record.finished_at
    earliest = ctx.started - CLOCK_SKEW
    if not (earliest <= started <= (finished or started) <= now + CLOCK_SKEW):  # a record may have no end
        found.retimed += 1
        started = finished = now
    return record.model_copy(update={"where": where, "run_id": ctx.run_id, "started_at": started,
                                     "finished_at": finished})
