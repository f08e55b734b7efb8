"""`gpuval fleet check`: plan a round, run it through the engine, read every job's output back per node, judge,
store, and again, until the planner has nothing left to learn; then the verdicts (a fault code shared by too many
nodes is one finding: fleet/act/drains.py), the drains (--drain, under the drain brake), and the verdicts stored.

Per round: the jobs (job.py) are sent at once (16 sends in flight), polled together until each ends (one status
call per poll for all of them: `Engine.statuses`, at 0, 2, 4 and 8 s, then every `poll_s`: engines.polling); a job
still queued after `queue_timeout_s`, or one the scheduler says cannot start (a partition's limit:
`JobStatus.blocked`, three looks in a row), is cancelled and its tests "could not run"; a job running past its
test's timeout is cancelled and its tests "hung" (evidence against their nodes); then each job's lines are read with
the node the engine says printed each (`Engine.node_lines`) into the round's TestResults (lines.py, streaming), which
`take_round` weighs. Every test's measurement is stored with each of its nodes (records.py) as soon as its round
is judged, so a check that is stopped keeps what it measured. A write that fails (a full disk) is a note, never the
end of the check: the verdicts and the drains stand, and the drains come before the verdicts are stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterable

from gpuval.engines.output import ordered_map
from gpuval.engines.polling import BlockedWatch, poll_delays
from gpuval.engines.site import Site
from gpuval.engines.spec import JobState
from gpuval.errors import GpuvalError
from gpuval.operate.brake import DrainCap, site_cap
from gpuval.operate.evidence import Grounds
from gpuval.results import Result, Status, save_results
from gpuval.results.bulk import bulk
from gpuval.results.verdict import fault_codes as record_fault_codes
from gpuval.fleet.act.grounds import MAX_ERROR, FailedNode, settings_json
from gpuval.fleet.act.drains import drain_failed, with_rack_faults, with_shared_faults
from gpuval.fleet.run.job import JobSettings, RoundJob, round_jobs
from gpuval.fleet.run.lines import Dropped, JobEnd, RoundReader
from gpuval.fleet.plan.terms import Evidence, Expect, FleetConfig, Round, TestResult
from gpuval.fleet.run.outcome import FleetOutcome, RoundLog, fault_codes, with_unavailable
from gpuval.fleet.plan.planner import plan_next
from gpuval.fleet.plan.rounds import take_round
from gpuval.fleet.run.records import Origin, measurement_records, verdict_records
from gpuval.fleet.plan.knowledge import FleetKnowledge, new_fleet
from gpuval.fleet.plan.racks_book import RackSpec
from gpuval.fleet.plan.verdicts import verdicts

WIDTH = 16  # engine calls in flight (sends, output reads)
HANG_GRACE_S = 60.0  # beyond the test timeout (ranks give up at it), before the job itself is called hung
MAX_KEPT = 50  # failed health records kept per node for its evidence bundle
MAX_UNANSWERED = 30  # status polls in a row without an answer before a job is given up


@dataclass
class _Sent:
    job: RoundJob
    job_id: str | None = None
    refused: str = ""
    sent_at: float = field(default_factory=time.monotonic)
    running_since: float | None = None
    end: JobEnd | None = None
    unanswered: int = 0  # status polls in a row the engine could not answer
    blocked: BlockedWatch = field(default_factory=BlockedWatch)  # looks in a row it was queued and could not start


@dataclass
class Unsaved:
    """Records a check could not store, and the first reason."""

    count: int = 0
    why: str = ""

    def add(self, count: int, why: str) -> None:
        self.count += count
        self.why = self.why or why

    def describe(self) -> str:
        return f"{self.count} record{'s' if self.count != 1 else ''} not stored ({self.why})"


@dataclass
class FleetRun:
    """One check: where (site), how each job is built (settings), the planner's knobs, the SKU's expectation."""

    site: Site
    settings: JobSettings
    config: FleetConfig = field(default_factory=FleetConfig)
    expect: Expect | None = None
    queue_timeout_s: float = 3600.0
    poll_s: float = 10.0
    results_path: Path | None = None
    on_round: Callable[[RoundLog], None] = lambda _log: None
    nodes: list[str] = field(default_factory=list)  # the nodes asked for (--nodelist expanded once, or picked)
    health_codes: dict[str, dict[str, None]] = field(default_factory=dict)  # node -> its failed checks' codes, in order
    health_failures: dict[str, list[Result]] = field(default_factory=dict)  # node -> its failed health records
    errors: dict[str, str] = field(default_factory=dict)  # test id -> its error (cut), for a drained node's evidence
    evidence_dir: Path | None = None  # where drained nodes' evidence bundles go [default: the state directory]
    unsaved: Unsaved = field(default_factory=Unsaved)
    cap: DrainCap = field(default_factory=lambda: site_cap(None))  # the drain brake's (--max-drain)
    racks: RackSpec = field(default_factory=RackSpec)  # what the baseline says of NVL72 racks (expect.rack_spec)

    @property
    def engine(self) -> Any:
        return self.site.engine

    def check(self, nodes: list[str], groups: dict[str, str] | None = None,
              racks: dict[str, str] | None = None) -> FleetOutcome:
        """Run every round on `nodes` (those that cannot take a job now are reported, not tested); `racks`: node ->
        its NVL72 rack where the site names them (else the NVLink domains the node tests read)."""
        away = self.site.unavailable(nodes)
        usable = [n for n in nodes if n not in away]
        logs: list[RoundLog] = []
        dropped = Dropped()
        given = {n: r for n, r in (racks or {}).items() if n in usable}
        spec = replace(self.racks, given=given, source=self.site.rack_source if given else "")
        state = new_fleet(usable, self.config, self.expect, {n: g for n, g in (groups or {}).items() if n in usable},
                          spec)
        while (rnd := _planned(state)) is not None:
            started = time.monotonic()
            done = self.run_round(rnd)
            with bulk():
                take_round(state, rnd, done.results)
                self._store(state, done)
            dropped.add(done.reader.dropped)
            logs.append(RoundLog.of(rnd, len(done.sent), time.monotonic() - started, done.reader.dropped.total))
            self.on_round(logs[-1])
        with bulk():
            found = with_unavailable(verdicts(state), away)
            if dropped.total:  # reported: a node that prints lines for another is itself worth a look
                found = replace(found, notes=(*found.notes, dropped.describe()))
            codes = {n: fault_codes(v, list(self.health_codes.get(n, {}))) for n, v in found.nodes.items()}
            found = with_shared_faults(with_rack_faults(found), {n: c for n, c in codes.items() if c}, self.cap)
        return FleetOutcome(self.settings.run_id, self.engine.name, found, logs, away, codes,
                            self.site.exclude([n for n, v in found.nodes.items() if v.status is Status.FAIL]))

    def conclude(self, outcome: FleetOutcome, drain: bool, only: Collection[str] | None = None) -> FleetOutcome:
        """Act, then store: the failed nodes (of `only` where given: a re-test's suspects) taken out and their
        evidence kept first (--drain, under the drain brake's cap: fleet/act/drains.py), so no write (a full disk, a
        store another writer holds) delays or stops a drain; then the verdict records, the brake's finding among
        them. What could not be stored is a note."""
        if drain:
            drain_failed(outcome, self.engine.node_client(), self.cap, self.grounds(outcome), self._evidence_dir(),
                         only)
        with bulk():
            self._save(verdict_records(outcome.verdicts, self.settings.run_id, self.engine.name, self.settings.sku,
                                       outcome.codes))
        if self.unsaved.count:
            outcome.verdicts = replace(outcome.verdicts, notes=(*outcome.verdicts.notes, self.unsaved.describe()))
        return outcome

    def grounds(self, outcome: FleetOutcome) -> dict[str, Grounds]:
        """What each failed node's evidence bundle keeps (fleet/act/grounds.py): its verdict, codes, tests' errors,
        failing health records and the settings its tests ran with."""
        settings = settings_json(self.settings, self.config)
        where = f"fleet check {outcome.run_id} on {outcome.engine}"
        return {n: FailedNode(v, outcome.codes.get(n, []), self.errors, self.health_failures.get(n, [])).grounds(
            settings, where) for n, v in outcome.verdicts.nodes.items() if v.status is Status.FAIL}

    def _evidence_dir(self) -> Path:
        from gpuval.workloads.health.last_full import state_dir

        return self.evidence_dir or state_dir()

    # ---- one round ------------------------------------------------------------------------------------------

    def run_round(self, rnd: Round) -> "RoundRun":
        """Send the round's jobs, wait for them, read them back: one TestResult per test."""
        settle = max((t.settle_s for t in rnd.tests), default=0.0)
        if settle > 0:  # a node test re-run after a reboot's settle time (racks.settles): its NVLink trains first
            time.sleep(settle)
        sent = list(ordered_map(self._send, round_jobs(rnd, self.settings, self.site), WIDTH))
        try:
            self._wait([s for s in sent if s.job_id])
        except KeyboardInterrupt:  # Ctrl-C (SIGTERM in a re-test's window): the round's jobs end with the check
            for item in sent:
                if item.job_id and item.end is None:
                    self._cancel(item)
            raise
        reader = RoundReader(rnd)
        # Each job's output streams into the reader (its own tests only), read_width jobs at a time: no output is
        # kept whole, only what each test's result needs.
        for _ in ordered_map(lambda item: self._read(reader, item), [s for s in sent if s.job_id],
                             self.site.read_width):
            pass
        with bulk():
            results = [reader.result(t, s.end or JobEnd(refused=s.refused)) for s in sent for t in s.job.tests]
        return RoundRun(rnd, results, sent, reader)

    def _send(self, job: RoundJob) -> _Sent:
        try:
            return _Sent(job, self.engine.submit(job.spec))
        except GpuvalError as exc:  # refused by the engine: never a verdict on the nodes
            return _Sent(job, refused=f"{self.engine.name} refused the job: {exc}")

    def _read(self, reader: RoundReader, item: _Sent) -> None:
        """One job's output, each line with the task or pod that printed it (read in a worker thread)."""
        try:
            reader.feed(self.engine.node_lines(str(item.job_id)), item.job.tests)
        except GpuvalError:
            pass  # no (more) output to read: the test says so ("no output came back")

    def _wait(self, sent: list[_Sent]) -> None:
        """Poll until every job ended (one engine call per poll for all the jobs still waiting); cancel what
        queues or runs too long."""
        waiting = list(sent)
        delays = poll_delays(self.poll_s)
        while waiting:
            found = self._statuses(waiting)
            for item in waiting:
                self._advance(item, found.get(str(item.job_id)))
            waiting = [s for s in waiting if s.end is None]
            if waiting:
                time.sleep(next(delays))

    def _statuses(self, items: list[_Sent]) -> dict[str, Any]:
        try:
            return self.engine.statuses([str(s.job_id) for s in items])
        except GpuvalError:
            return {}  # asked again next time

    def _advance(self, item: _Sent, status: Any) -> None:
        now = time.monotonic()
        if status is None:
            item.unanswered += 1
            if item.unanswered >= MAX_UNANSWERED:  # the engine lost it: read what it left, judge nobody by it
                self._cancel(item)
                item.end = JobEnd()
            return
        item.unanswered = 0
        if status.state.done:
            item.end = JobEnd(status)
            return
        if status.state is JobState.RUNNING and item.running_since is None:
            item.running_since = now
        limit = self.settings.timeout_s + HANG_GRACE_S
        if item.running_since is not None and now - item.running_since > limit:
            self._cancel(item)
            item.end = JobEnd(status, hung=f"hung: still running after {limit:.0f} s, cancelled")
        elif item.running_since is None and (why := item.blocked.stuck(status)):
            self._cancel(item)  # it would wait out the queue timeout for nothing
            item.end = JobEnd(status, pending=f"could not start: {why}; cancelled")
        elif item.running_since is None and now - item.sent_at > self.queue_timeout_s:
            self._cancel(item)
            item.end = JobEnd(status, pending=f"could not start: still {status.state.value} after "
                                              f"{self.queue_timeout_s:.0f} s in the queue, cancelled")

    def _cancel(self, item: _Sent) -> None:
        try:
            self.engine.cancel(str(item.job_id))
        except GpuvalError:
            pass  # it ended meanwhile, or the engine will end it at its time limit

    def _store(self, state: FleetKnowledge, done: "RoundRun") -> None:
        """This round's measurements (one record per node per test) and the node tests' health records (built on
        the node, which knew neither the engine nor the job: stamped here); failed checks' fault codes are kept
        for a drain's reason."""
        evidence = round_evidence(state, done.round)
        job_of = {t.id: s.job_id for s in done.sent for t in s.job.tests}
        by_id = {r.test_id: r for r in done.results}
        out: list[Result] = []
        for test in done.round.tests:
            got = done.reader.collected[test.id]
            for r in got.health:
                r.where.engine, r.where.job_id = self.engine.name, job_of.get(test.id)
                if r.status is Status.FAIL:
                    codes = self.health_codes.setdefault(r.where.hostname, {})
                    codes.update(dict.fromkeys(record_fault_codes(r)))  # an ordered set: linear in the codes
                    kept = self.health_failures.setdefault(r.where.hostname, [])
                    if len(kept) < MAX_KEPT:
                        kept.append(r)
            if by_id[test.id].error:
                self.errors[test.id] = str(by_id[test.id].error)[:MAX_ERROR]
            size = self.settings.sizes.of(test.kind, test.purpose)
            out += got.health
            origin = Origin(run_id=self.settings.run_id, engine=self.engine.name, sku=self.settings.sku,
                            job_id=job_of.get(test.id), ranks=got.ranks)
            out += measurement_records(test, by_id[test.id], evidence.get(test.id), origin=origin, size=size)
        self._save(out)

    def _save(self, records: Iterable[Result]) -> None:
        """Store records; a write that fails is counted in `unsaved`, never raised (the check goes on)."""
        batch = list(records)
        try:
            save_results(batch, self.results_path)
        except OSError as exc:
            self.unsaved.add(len(batch), f"{exc.filename or self.results_path}: {exc.strerror or exc}")
        except GpuvalError as exc:
            self.unsaved.add(len(batch), str(exc))


@dataclass
class RoundRun:
    """One round as it ran: its results, its jobs, what their lines said."""

    round: Round
    results: list[TestResult]
    sent: list[_Sent]
    reader: RoundReader


def _planned(state: FleetKnowledge) -> Round | None:
    with bulk():  # the planner's state is a heap of small objects: no collector passes over it while planning
        return plan_next(state)


def round_evidence(state: FleetKnowledge, rnd: Round) -> dict[str, Evidence]:
    """test id -> the evidence `record` gave it in round `rnd` (read from the nodes' and group runs' evidence)."""
    found: dict[str, Evidence] = {}
    for node in rnd.nodes:
        for ev in reversed(state.nodes[node].evidence):
            if ev.round != rnd.index:
                break
            found.setdefault(ev.test.id, ev)
    for run in state.group_runs:
        if run.evidence is not None and run.evidence.round == rnd.index:
            found[run.evidence.test.id] = run.evidence
    return found


def fleet_nodes(site: Site, count: int | None, nodelist: str | None) -> list[str]:
    """The nodes to check: --nodelist expanded, or --nodes N picked by the engine."""
    if nodelist is not None:
        return site.expand(nodelist)
    return site.pick(count or 0)
