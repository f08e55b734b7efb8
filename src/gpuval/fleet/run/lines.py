"""What fleet workers print, and reading it back: one JSON object per line, tagged, whatever else the job prints.

Every line a worker prints starts with `{"gpuval_fleet": 1,` and names the round, the node it was printed on (the
scheduler's name for it: engines.nodes.this_node) and, for pair and group tests, the test id; a node test is found by
(round, node). Events:

    start    a rank or node task began (so "ended without a result" is a crash, not "never started")
    health   one health check's Result record, built on that node (its GPU figures are read from these: figures.py)
    suite    the node's health-suite verdict (status, reason): read only when none of its health records came back;
             and the node's seconds since boot (uptime_s), which the NVLink debounce after a reboot reads
    samples  a collective's per-cycle busbw at the test's size (GB/s, unrounded), with the job's hosts by rank
    error    what a rank or node task raised (one line), naming its node and rank
    nvlink   what one rank of an NVL72 rack's test read in its own NCCL log: MNNVL, NVLS (racks_read.py)

One line is one write: the nodes of a job share one output file (Slurm) and their lines must not interleave. srun
forwards a task's output in messages of 1 KiB and labels each message as a line of its own, so a longer line (a
health record with per-GPU rows) is written as `gpuval-piece` lines (results/pieces.py), joined back per node.
The reader takes a job's output as an iterator of (source, line) pairs (Engine.node_lines: the node whose task or
pod printed each line, as the engine says), keeps only tagged lines of the job's own tests (other jobs' and other
rounds' lines are ignored, so a listing that returns too many pods is harmless), drops and counts lines whose `node`
or `test` disagrees with their source and lines whose values no worker prints (Dropped), and holds per test only
what a TestResult needs: linear in the output, never the whole output in memory.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable
from uuid import uuid4

from gpuval.engines.spec import JobState, JobStatus
from gpuval.results.bulk import bulk
from gpuval.results.model import Result, Status
from gpuval.results.pieces import MARK, PieceJoiner, record_lines
from gpuval.results.verdict import fault_codes, node_verdict
from gpuval.fleet.plan.terms import Round, Test, TestResult
from gpuval.fleet.run.racks_read import NvlinkTally, domain_of
from gpuval.fleet.run.figures import node_figures

TAG = '{"gpuval_fleet":'
VERSION = 1


def line(event: str, **fields: Any) -> str:
    """One tagged line (no newline)."""
    return json.dumps({"gpuval_fleet": VERSION, "event": event, **fields}, separators=(",", ":"), default=str)


def emit(event: str, **fields: Any) -> None:
    """Print one tagged line, flushed: one write, or one write per piece where it is longer than a launcher's
    message."""
    for piece in record_lines(line(event, **fields) + "\n", uuid4().hex):
        sys.stdout.write(piece)
        sys.stdout.flush()


@dataclass
class Collected:
    """What one test's lines said so far."""

    started: set[str] = field(default_factory=set)  # nodes with a task or rank that began
    busbw: dict[str, list[float]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    ranks: int | None = None
    errors: list[tuple[str, int | None, str]] = field(default_factory=list)  # (node, rank, message), the first few
    error_count: int = 0
    blamed: dict[str, None] = field(default_factory=dict)  # every node that reported an error, in order
    set_up_only: bool = True  # every error so far says the job could not be set up (_SET_UP)
    health: list[Result] = field(default_factory=list)
    suite: tuple[Status, str] | None = None
    elsewhere: set[str] = field(default_factory=set)  # nodes outside the test its job's own lines came from
    uptime: float | None = None  # a node test's: seconds since the node booted
    nvlink: NvlinkTally = field(default_factory=NvlinkTally)  # a rack test's ranks' NCCL proof


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


@dataclass
class Dropped:
    """Tagged lines of this round the reader would not take, by why: no source (a line no task or pod can be
    named for), a source that disagrees with the line's own node or test (one node's output about another), or a
    value no worker prints (status "bogus", busbw "abc", NaN, -1e308): ignored as a cut-short line is."""

    unattributed: int = 0
    mismatched: int = 0
    malformed: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, other: "Dropped") -> None:
        """Count another job's drops in."""
        self.unattributed += other.unattributed
        self.mismatched += other.mismatched
        self.malformed += other.malformed
        self.examples += other.examples[:EXAMPLES - len(self.examples)]

    def note(self, kind: str, why: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < EXAMPLES:
            self.examples.append(why)

    @property
    def total(self) -> int:
        return self.unattributed + self.mismatched + self.malformed

    def describe(self) -> str:
        """'3 lines dropped (2 not from the node they name, 1 malformed): ...'."""
        parts = [f"{n} {what}" for n, what in ((self.mismatched, "not from the node or test they name"),
                                                (self.unattributed, "from no known task or pod"),
                                                (self.malformed, "malformed")) if n]
        return f"{self.total} line{'s' if self.total != 1 else ''} dropped ({', '.join(parts)})" + (
            f": {'; '.join(self.examples)}" if self.examples else "")


EXAMPLES = 3  # drops described by example
KEPT = 16  # error lines kept per test (the rest counted)
MAX_HEALTH = 256  # health records per node test (a suite has about 32 checks)
MAX_BUSBW = 1e7  # GB/s: ten petabytes a second is no figure a link gives (and keeps sums finite)


class RoundReader:
    """Collects the lines of one round's jobs into one TestResult per test. Each job's output is read with the
    source of every line (Engine.node_lines); jobs may be read at once, one thread each (each fills only its own tests)."""

    def __init__(self, rnd: Round) -> None:
        self.round = rnd
        self.tests = {t.id: t for t in rnd.tests}
        self.node_tests = {t.nodes[0]: t.id for t in rnd.tests if t.kind == "node"}
        self.collected = {t.id: Collected() for t in rnd.tests}
        self.job_tests: dict[str, frozenset[str]] = {}  # test id -> the tests of its job (read with it)
        self.dropped = Dropped()
        self._lock = threading.Lock()

    def feed(self, lines: Iterable[tuple[str | None, str]], tests: Iterable[Test] | None = None) -> int:
        """Read one job's output, each line with the node that printed it (None: unknown); only the job's `tests`
        (default: the round's) are filled. Returns how many lines it took."""
        own = {t.id for t in tests} if tests is not None else set(self.tests)
        with self._lock:
            self.job_tests.update(dict.fromkeys(own, frozenset(own)))
        dropped = Dropped()
        with bulk():
            taken = self._feed(lines, own, dropped)
        with self._lock:
            self.dropped.add(dropped)
        return taken

    def _feed(self, lines: Iterable[tuple[str | None, str]], own: set[str], dropped: Dropped) -> int:
        taken = 0
        pieces = PieceJoiner()
        for source, raw in lines:
            if raw.startswith(MARK):
                raw = pieces.add(raw, source or "") or ""
            if not raw.startswith(TAG):
                continue  # logs, NCCL chatter, srun's warnings: not ours (a cheap test first: most lines fail it)
            try:
                doc = json.loads(raw)
            except (ValueError, RecursionError):
                continue  # a line cut short (a node died mid-write): the rest of its test says what happened
            if not isinstance(doc, dict) or doc.get("round") != self.round.index:
                continue  # another round's line (a pod listing that returned earlier jobs' pods)
            test_id = self._attribute(doc, source, own, dropped)
            if test_id is None or test_id not in own:
                continue  # dropped, or another job's test (read with that job)
            why = _take(self.collected[test_id], doc, source or "")
            if why:
                dropped.note("malformed", f"{source}: {why}")
            else:
                taken += 1
        return taken

    def _attribute(self, doc: dict[str, Any], source: str | None, own: set[str], dropped: Dropped) -> str | None:
        """The test a line belongs to when its source backs its own node and test fields, else None (counted). A
        line of the job's own test from a node the test does not have says the job ran there (not pinned)."""
        node, test = doc.get("node"), doc.get("test")
        if source is None:
            dropped.note("unattributed", f"a line naming {str(node)[:40]!r} from no task or pod")
            return None
        if node != source:
            dropped.note("mismatched", f"{source} printed a line naming {str(node)[:40]!r}")
            return None
        test_id = self.node_tests.get(source) if test is None else test
        found = self.tests.get(test_id) if isinstance(test_id, str) else None
        if found is not None and found.id in own and source not in found.nodes and found.kind != "node":
            self.collected[found.id].elsewhere.add(source)
            return None
        if found is None or source not in found.nodes:
            dropped.note("mismatched", f"{source} printed a line for test {str(test)[:40]!r}, not its own")
            return None
        return found.id

    def result(self, test: Test, end: JobEnd) -> TestResult:
        """The TestResult of one test, from its lines and how its job ended."""
        got = self.collected[test.id]
        if end.refused:
            return TestResult(test.id, not_run=end.refused)
        if end.pending and not got.started:
            return TestResult(test.id, not_run=end.pending)
        ended_by = self._ended_by_another(test, got, end)
        if ended_by:
            return TestResult(test.id, not_run=ended_by)
        if test.kind == "node":
            return _node_result(test, got, end)
        return _rank_result(test, got, end)

    def _ended_by_another(self, test: Test, got: Collected, end: JobEnd) -> str:
        """Why a node test that started and said nothing more (no result, no error of its own) could not run: its
        job failed where another node test of the job reported an error, so a launcher that ends a job's tasks
        when one fails (srun --kill-on-bad-exit, a Job past its backoff limit) may have ended it. A task ended
        that way is no crash of its node. "" when that is not the case."""
        if test.kind != "node" or not got.started or got.errors or end.hung or end.status is None:
            return ""
        if end.status.state not in (JobState.FAILED, JobState.CANCELLED):
            return ""
        if got.suite is not None and any(got.busbw.values()):
            return ""  # it has its result
        failed = [node for mate in sorted(self.job_tests.get(test.id, ())) if mate != test.id
                  for node in self.collected[mate].blamed]
        if not failed:
            return ""
        return f"its job ended when {', '.join(failed[:3])} failed, before it had a result: {end.describe()}"


def _take(got: Collected, doc: dict[str, Any], node: str) -> str:
    """Add one attributed line to its test; returns why it is malformed ('' when taken)."""
    event = doc.get("event")
    if event == "start":
        got.started.add(node)
    elif event == "samples":
        busbw, hosts, coll = doc.get("busbw"), doc.get("hosts") or [], doc.get("collective")
        if not isinstance(coll, str) or not isinstance(busbw, list) or not all(_figure(x) for x in busbw):
            return "samples that are not figures"
        if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
            return "hosts that are not names"
        got.busbw[coll] = [float(x) for x in busbw]
        got.hosts = hosts
        got.ranks = doc.get("ranks") if type(doc.get("ranks")) is int else None
    elif event == "error":
        rank = doc.get("rank")
        message = str(doc.get("error", ""))[:500]
        got.error_count += 1
        got.blamed[node] = None
        got.set_up_only = got.set_up_only and any(m in message for m in _SET_UP)
        if len(got.errors) < KEPT:  # a node printing a million errors costs no memory
            got.errors.append((node, rank if type(rank) is int else None, message))
    elif event == "health":
        try:
            record = Result.model_validate(doc.get("record"))
        except (ValueError, RecursionError):
            return "a health record that is not one"
        if len(got.health) >= MAX_HEALTH:
            return "more health records than a suite has checks"
        record.where.hostname = node  # the scheduler's name of the node it ran on, not the machine's
        got.health.append(record)
    elif event == "suite":
        if doc.get("status") not in _STATUSES:
            return f"suite status {str(doc.get('status'))[:20]!r}"
        got.suite = (Status(doc["status"]), str(doc.get("reason", ""))[:500])
        up = doc.get("uptime_s")
        got.uptime = float(up) if type(up) in (int, float) and math.isfinite(up) and up >= 0 else None
    elif event == "nvlink":
        return got.nvlink.take(doc)
    else:
        return f"event {str(event)[:20]!r}"
    return ""


_STATUSES = {s.value for s in Status}


def _figure(x: Any) -> bool:
    """A busbw figure: a real number (not a bool), finite, 0 to MAX_BUSBW GB/s."""
    return type(x) in (int, float) and math.isfinite(x) and 0.0 <= x <= MAX_BUSBW


# What a rank says when its job could not be set up, whichever nodes it ran on: the rendezvous port was taken on
# the first node (another job, a client's ephemeral port). Could not run, never evidence against the nodes.
_SET_UP = ("EADDRINUSE", "address already in use")


def _set_up_failed(got: Collected) -> str | None:
    """The first error when every error of the test is a set-up failure (see _SET_UP), else None."""
    if got.errors and got.set_up_only:
        return _errors(got)[0]
    return None


def _errors(got: Collected) -> tuple[str, tuple[str, ...]]:
    first = got.errors[0]
    where = f"{first[0]} rank {first[1]}" if first[1] is not None else first[0]
    more = f" (and {got.error_count - 1} more)" if got.error_count > 1 else ""
    blame = tuple(got.blamed)
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
    elsewhere = (set(got.hosts) | got.elsewhere) - set(test.nodes)
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
        return TestResult(test.id, {c: tuple(got.busbw[c]) for c in test.collectives}, nvlink=got.nvlink.proof())
    return _ended(test, got, end) or TestResult(test.id, error="ended without a result")


def _node_result(test: Test, got: Collected, end: JobEnd) -> TestResult:
    busbw = {c: tuple(v) for c, v in got.busbw.items() if v}
    set_up = _set_up_failed(got)
    if set_up:
        return TestResult(test.id, not_run=f"the job could not be set up: {set_up}")
    if got.errors:
        error, blame = _errors(got)
        return TestResult(test.id, busbw, error=error, blame=blame)
    # The health verdict is judged here, from the records the node printed (THE node verdict); the node's own
    # `suite` line is read only when none of its records came back.
    health = suite_verdict(got.health) if got.health else got.suite
    if health is None or not busbw:
        return _ended(test, got, end) or TestResult(test.id, error="ended without a result")
    status, reason = health
    codes = tuple(dict.fromkeys(c for r in got.health if r.status is Status.FAIL for c in fault_codes(r)))
    return TestResult(test.id, busbw, health=status, health_reason=reason, domain=domain_of(got.health),
                      uptime_s=got.uptime, health_codes=codes, gpus=node_figures(got.health))


def suite_verdict(records: list[Result]) -> tuple[Status, str]:
    """A node's health-suite verdict from its checks: THE node verdict (results.verdict.node_verdict): FAIL when a
    check failed, ERROR when one could not run (the node's figures are still judged, but it is not cleared), WARN,
    PASS, or SKIPPED when nothing was judged."""
    if not records:
        return Status.ERROR, "no health check ran"
    found = node_verdict(records)
    if found.status in (Status.FAIL, Status.WARN):
        named = [f"{r.name}: {r.reason}" for r in records if r.status is found.status]
        return found.status, "; ".join(named[:3]) + (f" (+{len(named) - 3})" if len(named) > 3 else "")
    return found.status, found.reason
