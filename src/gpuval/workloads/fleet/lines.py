"""What fleet workers print, and reading it back: one JSON object per line, tagged, whatever else the job prints.

Every line a worker prints starts with `{"gpuval_fleet": 1,` and names the round, the node it was printed on (the
scheduler's name for it, see worker.node_name) and, for pair and group tests, the test id; a node test is found by
(round, node). Events:

    start    a rank or node task began (so "ended without a result" is a crash, not "never started")
    health   one health check's Result record, built on that node
    suite    the node's health-suite verdict (status, reason)
    samples  a collective's per-cycle busbw at the test's size (GB/s, unrounded), with the job's hosts by rank
    error    what a rank or node task raised (one line), naming its node and rank

One line is one write: the nodes of a job share one output file (Slurm) and their lines must not interleave.
The reader takes a job's output as an iterator of lines (Engine.log_lines), keeps only tagged lines of the round's
tests (other jobs' and other rounds' lines are ignored, so a listing that returns too many pods is harmless), and
holds per test only what a TestResult needs: linear in the output, never the whole output in memory.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable

from gpuval.engines.spec import JobState, JobStatus
from gpuval.results.bulk import bulk
from gpuval.results.model import Result, Status, worst_status
from gpuval.workloads.fleet.model import Round, Test, TestResult

TAG = '{"gpuval_fleet":'
VERSION = 1


def line(event: str, **fields: Any) -> str:
    """One tagged line (no newline)."""
    return json.dumps({"gpuval_fleet": VERSION, "event": event, **fields}, separators=(",", ":"), default=str)


def emit(event: str, **fields: Any) -> None:
    """Print one tagged line in one write, flushed."""
    sys.stdout.write(line(event, **fields) + "\n")
    sys.stdout.flush()


@dataclass
class Collected:
    """What one test's lines said so far."""

    started: set[str] = field(default_factory=set)  # nodes with a task or rank that began
    busbw: dict[str, list[float]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    ranks: int | None = None
    errors: list[tuple[str, int | None, str]] = field(default_factory=list)  # (node, rank, message)
    health: list[Result] = field(default_factory=list)
    suite: tuple[Status, str] | None = None


@dataclass(frozen=True)
class JobEnd:
    """How a test's job ended, as the driver saw it: its last status, that it was never sent (refused), that it
    stayed queued past the limit (pending), or that it ran past the limit and was cancelled (hung)."""

    status: JobStatus | None = None
    refused: str = ""
    pending: str = ""
    hung: str = ""

    def describe(self) -> str:
        """One phrase for a reason."""
        if self.status is None:
            return "no status"
        state = self.status.native_state or self.status.state.value
        code = f", exit code {self.status.exit_code}" if self.status.exit_code not in (None, 0) else ""
        return f"job {self.status.job_id} {state}{code}" + (f" ({self.status.detail})" if self.status.detail else "")


class RoundReader:
    """Collects the lines of one round's jobs into one TestResult per test."""

    def __init__(self, rnd: Round) -> None:
        self.round = rnd
        self.tests = {t.id: t for t in rnd.tests}
        self.node_tests = {t.nodes[0]: t.id for t in rnd.tests if t.kind == "node"}
        self.collected = {t.id: Collected() for t in rnd.tests}

    def feed(self, lines: Iterable[str]) -> int:
        """Read a job's output; returns how many tagged lines of this round it held."""
        with bulk():
            return self._feed(lines)

    def _feed(self, lines: Iterable[str]) -> int:
        taken = 0
        for raw in lines:
            if not raw.startswith(TAG):
                continue  # logs, NCCL chatter, srun's warnings: not ours (a cheap test first: most lines fail it)
            try:
                doc = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a line cut short (a node died mid-write): the rest of its test says what happened
            if isinstance(doc, dict) and doc.get("round") == self.round.index and self._take(doc):
                taken += 1
        return taken

    def _take(self, doc: dict[str, Any]) -> bool:
        test_id = doc.get("test") or self.node_tests.get(str(doc.get("node", "")))
        got = self.collected.get(str(test_id))
        if got is None:
            return False
        node, event = str(doc.get("node", "")), doc.get("event")
        if event == "start":
            got.started.add(node)
        elif event == "samples":
            got.busbw[str(doc.get("collective"))] = [float(x) for x in doc.get("busbw") or []]
            got.hosts = [str(h) for h in doc.get("hosts") or []]
            got.ranks = doc.get("ranks") if isinstance(doc.get("ranks"), int) else None
        elif event == "error":
            rank = doc.get("rank")
            got.errors.append((node, rank if isinstance(rank, int) else None, str(doc.get("error", ""))))
        elif event == "health":
            try:
                record = Result.model_validate(doc.get("record"))
            except ValueError:
                return False
            record.where.hostname = node  # the scheduler's name of the node it ran on, not the machine's
            got.health.append(record)
        elif event == "suite":
            got.suite = (Status(doc.get("status", "error")), str(doc.get("reason", "")))
        else:
            return False
        return True

    def result(self, test: Test, end: JobEnd) -> TestResult:
        """The TestResult of one test, from its lines and how its job ended."""
        got = self.collected[test.id]
        if end.refused:
            return TestResult(test.id, not_run=end.refused)
        if end.pending and not got.started:
            return TestResult(test.id, not_run=end.pending)
        if test.kind == "node":
            return _node_result(test, got, end)
        return _rank_result(test, got, end)


# What a rank says when its job could not be set up, whichever nodes it ran on: the rendezvous port was taken on
# the first node (another job, a client's ephemeral port). Could not run, never evidence against the nodes.
_SET_UP = ("EADDRINUSE", "address already in use")


def _set_up_failed(got: Collected) -> str | None:
    """The first error when every error of the test is a set-up failure (see _SET_UP), else None."""
    if got.errors and all(any(m in error for m in _SET_UP) for _, _, error in got.errors):
        return _errors(got)[0]
    return None


def _errors(got: Collected) -> tuple[str, tuple[str, ...]]:
    first = got.errors[0]
    where = f"{first[0]} rank {first[1]}" if first[1] is not None else first[0]
    more = f" (and {len(got.errors) - 1} more)" if len(got.errors) > 1 else ""
    blame = tuple(dict.fromkeys(node for node, _, _ in got.errors))
    return f"{where}: {first[2]}{more}", blame


def _ended(test: Test, got: Collected, end: JobEnd) -> TestResult | None:
    """Without figures: could not run (nothing started), or ran and failed (crash, kill, hang)."""
    if end.hung:
        return TestResult(test.id, error=end.hung, blame=())
    if end.status is None:  # the engine stopped answering about the job: nothing it did is known
        return TestResult(test.id, not_run="the engine stopped answering about its job (cancelled)")
    if not got.started:
        status = end.status
        if status is not None and status.state in (JobState.FAILED, JobState.CANCELLED, JobState.UNKNOWN):
            return TestResult(test.id, not_run=f"the job ended before any rank started: {end.describe()}")
        return TestResult(test.id, not_run=f"no output came back: {end.describe()}")
    missing = sorted(set(test.nodes) - got.started)
    also = f"; no rank started on {', '.join(missing)}" if missing else ""
    return TestResult(test.id, error=f"ended without a result: {end.describe()}{also}")


def _rank_result(test: Test, got: Collected, end: JobEnd) -> TestResult:
    elsewhere = set(got.hosts) - set(test.nodes)
    if elsewhere:  # the engine did not pin it: its figures say nothing about the test's nodes
        return TestResult(test.id, not_run=f"the job ran on {', '.join(sorted(elsewhere)[:4])}, not on the "
                                           f"test's nodes: {end.describe()}")
    set_up = _set_up_failed(got)
    if set_up:
        return TestResult(test.id, not_run=f"the job could not be set up: {set_up}")
    if got.errors:
        error, blame = _errors(got)
        return TestResult(test.id, {c: tuple(v) for c, v in got.busbw.items()}, error=error, blame=blame)
    if all(got.busbw.get(c) for c in test.collectives):
        return TestResult(test.id, {c: tuple(got.busbw[c]) for c in test.collectives})
    return _ended(test, got, end) or TestResult(test.id, error="ended without a result")


def _node_result(test: Test, got: Collected, end: JobEnd) -> TestResult:
    busbw = {c: tuple(v) for c, v in got.busbw.items() if v}
    set_up = _set_up_failed(got)
    if set_up:
        return TestResult(test.id, not_run=f"the job could not be set up: {set_up}")
    if got.errors:
        error, blame = _errors(got)
        return TestResult(test.id, busbw, error=error, blame=blame)
    if got.suite is None or not busbw:
        return _ended(test, got, end) or TestResult(test.id, error="ended without a result")
    status, reason = got.suite
    return TestResult(test.id, busbw, health=status, health_reason=reason)


def suite_verdict(records: list[Result]) -> tuple[Status, str]:
    """A node's health-suite verdict from its checks: FAIL or WARN as the worst check; ERROR only when no check
    could run at all (one check that could not run does not stop the node's other tests); else PASS or SKIPPED."""
    if not records:
        return Status.ERROR, "no health check ran"
    statuses = [r.status for r in records]
    bad = [r for r in records if r.status in (Status.FAIL, Status.WARN)]
    if bad:
        worst = worst_status(r.status for r in bad)
        named = [f"{r.name}: {r.reason}" for r in bad if r.status == worst]
        return worst, "; ".join(named[:3]) + (f" (+{len(named) - 3})" if len(named) > 3 else "")
    if all(s == Status.ERROR for s in statuses):
        return Status.ERROR, "; ".join(f"{r.name}: {r.reason}" for r in records[:3])
    errors = [r.name for r in records if r.status == Status.ERROR]
    note = f" ({len(errors)} could not run: {', '.join(errors[:5])})" if errors else ""
    passed = Status.PASS if Status.PASS in statuses else Status.SKIPPED
    return passed, f"{statuses.count(Status.PASS)} checks pass, {statuses.count(Status.SKIPPED)} skipped{note}"
