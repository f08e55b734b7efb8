"""Which rank(s) a hung job waits for: from every node's rank probes (gpuval.node.rank_probe: each rank's progress,
process state and Python stacks), where NCCL runs its RAS status (gpuval.collectives.nccl_ras), and where the ranks
dumped their PyTorch Flight Recorder the first collective of each process group where they part ways
(gpuval.diagnosis.flight).

A job hangs when no rank made progress (a step, a collective launched or completed) for `stall_s`. Then the ranks
the others wait for are, in this order of evidence: ranks whose process is gone, ranks no node has a state for,
stopped processes, and running ranks that have not launched the collective the waiting ranks are in (their
`launched` count, the collective's sequence number, is behind), unless such a rank waits inside an earlier
collective a stopped or gone rank has not completed: that rank holds it up too. When every rank is in the same
collective, none is behind: the collective itself does not complete (the network, or NCCL: RAS names dead,
unresponsive or erroring processes). RAS's MISMATCH in operation counts alone is no fault (RAS's own docs: it is
normal while collectives run); in a hang, ranks behind in RAS's counts are named as such.

Each rank named says which evidence it rests on (`RankHang.evidence`): `process state` (/proc's state of the process
its state file names: gone, stopped), `state file` (its collective count), the stacks' source where they show where
it is (`py-spy`, `faulthandler`), `step records` (a rank with no state, placed by its records), `flight recorder`.
The Flight Recorder's root ranks (the ranks the others' waits end at, per group: gpuval.diagnosis.flight) join the
ranks named, or are marked on them; a rank named only by its count whose dump shows it waiting in a collective for
root ranks is not named (a count sums every group's collectives; the recorder tells them apart), said in a note.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

from gpuval.collectives.nccl_ras import RasRank, RasStatus
from gpuval.diagnosis.flight import FlightAnalysis, GroupFinding
from gpuval.diagnosis.job_records import absent_ranks, rank_list
from gpuval.node.pystacks import Frame, Stacks
from gpuval.node.rank_probe import RankProbe

STALL_S = 60.0
PROCESS, COUNT, RECORDS, FLIGHT = "process state", "state file", "step records", "flight recorder"
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "reduce", "barrier", "monitored_barrier",
    "all_to_all", "all_to_all_single", "send", "recv", "gather", "scatter", "batch_isend_irecv", "wait"})
# DDP's broadcasts of its module's buffers (each forward) and parameters (at its start), in torch/nn/parallel: a
# C++ collective that no torch.distributed function wraps, so the step timer does not count it
DDP_BROADCASTS = frozenset({"_distributed_broadcast_coalesced", "_sync_buffers", "_sync_module_buffers",
                            "_default_broadcast_coalesced", "_sync_params_and_buffers"})


@dataclass(frozen=True)
class RankHang:
    """One rank at the moment of the probe: where it is (node, GPU), how far it got and what it is doing."""

    rank: int
    node: str | None
    pid: int | None
    gpu: int | None
    bus: str | None
    state: str  # the process's state in words
    step: int | None
    launched: int | None
    completed: int | None
    in_collective: bool
    idle_s: float | None
    frame: str = ""  # the main thread's innermost frame
    collective: str = ""  # the collective its stack is in, where one is
    stacks: str = ""  # where the stack came from, or why there is none
    why: str = ""  # why the others wait for it (waited-for ranks only)
    evidence: tuple[str, ...] = ()  # what `why` rests on (waited-for ranks only; the module's labels)


@dataclass(frozen=True)
class RasSuspect:
    """A process RAS names: dead, unresponsive, aborted, in error, or (in a hang) behind in its operation counts.
    RAS knows a process by its address (`host`) and pid, and a rank by its place in a communicator (`comm_rank`);
    `node` and `rank` are the job's, where a probed rank has that pid (else empty and None)."""

    node: str
    host: str
    pid: int | None
    rank: int | None
    comm_rank: int | None
    gpu: int | None
    why: str
    severity: Literal["error", "warning"]

    def where(self) -> str:
        """The node, else RAS's address for it."""
        return self.node or f"{self.host} (NCCL RAS's address)"


@dataclass
class HangReport:
    """The hang analysis: `outcome` hang, progressing, or not judged, with the reason; the ranks waited for."""

    outcome: Literal["hang", "progressing", "not judged"]
    reason: str
    waited_for: list[RankHang] = field(default_factory=list)
    ranks: list[RankHang] = field(default_factory=list)
    ras: list[RasSuspect] = field(default_factory=list)
    stacks: dict[int, Stacks] = field(default_factory=dict)  # each probed rank's, as read
    notes: list[str] = field(default_factory=list)


def _where(frame: Frame) -> str:
    return f"{frame.function} ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame.line else frame.function


def collective_of(stacks: Stacks | None) -> tuple[str, str]:
    """(the main thread's innermost frame, the collective it is in or ""): the outermost torch.distributed frame
    named as a collective, the timer's own wait, or autograd's backward (DDP's all-reduce runs inside it)."""
    thread = stacks.main_thread() if stacks else None
    if thread is None or not thread.frames:
        return "", ""
    found = ""
    for frame in thread.frames:
        path, function = frame.file.replace("\\", "/"), frame.function.rsplit(".", 1)[-1]  # py-spy: Class.method
        if frame.function in COLLECTIVES and ("torch/distributed/" in path or "gpuval/hooks/" in path):
            found = _where(frame)
        elif not found and function in DDP_BROADCASTS and "torch/nn/parallel/" in path:
            found = f"{_where(frame)}: DDP's buffer broadcast (C++: the timer does not count it)"
        elif not found and frame.function in ("backward", "_engine_run_backward") and "torch/" in path:
            found = f"{_where(frame)}: DDP's gradient all-reduce runs inside it"
    return _where(thread.frames[0]), found


def _rank_row(node: str, probe: RankProbe) -> RankHang:
    frame, collective = collective_of(probe.stacks)
    ident, progress = probe.identity, probe.progress
    source = (probe.stacks.source or probe.stacks.problem) if probe.stacks else "not read"
    return RankHang(ident.rank, node, ident.pid, ident.gpu, ident.bus, probe.describe_state(), progress.step,
                    progress.launched, progress.completed, progress.in_collective, probe.idle_s(), frame, collective,
                    source)


def _missing_row(rank: int, node: str | None) -> RankHang:
    return RankHang(rank, node, None, None, None, "no state found", None, None, None, False, None,
                    why="no node has a state file for it: it never started the timer, or its node was not probed",
                    evidence=(RECORDS,))


@dataclass
class _Waits:
    """What the ranks' own state says: the ranks waited for, the sentence that says so, the ranks behind that wait
    in a collective a halted rank has not completed (rank -> those halted ranks), and notes on them."""

    named: list[RankHang]
    sentence: str
    held: dict[int, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _waited_for(rows: list[RankHang], probes: list[tuple[str, RankProbe]]) -> _Waits:
    """The ranks the others wait for, by the ranks' process state and counts."""
    gone = [r for (_, p), r in zip(probes, rows) if p.state == "gone"]
    stopped = [r for (_, p), r in zip(probes, rows) if p.state in ("T", "t", "Z", "X")]
    running = [r for (_, p), r in zip(probes, rows) if p.running]
    waiting = [r for r in running if r.in_collective or r.collective]
    named = [_why(r, "its process is gone", (PROCESS,)) for r in gone]
    named += [_why(r, f"its process is {r.state}", (PROCESS,)) for r in stopped]
    if waiting:
        top = max(r.launched or 0 for r in waiting)
        where = next((r.collective for r in waiting if r.collective and r.launched == top), "")
        waits = _behind(running, top, gone + stopped)
        named += waits.named
        waits.named = named
        waits.sentence = (f"rank(s) {rank_list(r.rank for r in named)} hold up the ranks waiting in collective #{top}"
                          if named else f"every rank waits in collective #{top}{f' ({where})' if where else ''}: "
                          "none is behind, the collective itself does not complete (the network or NCCL: see RAS)")
        return waits
    if named:
        return _Waits(named, f"rank(s) {rank_list(r.rank for r in named)} stopped making progress")
    return _Waits([], "no rank is in a collective and none stopped: the job is stuck outside collectives (see the "
                      "stacks)")


def _behind(running: list[RankHang], top: int, halted: list[RankHang]) -> _Waits:
    """The running ranks that have not launched collective #`top`, each named by its count, except one that waits
    in a collective (counted, or one its stack shows: DDP's buffer broadcast) that a halted (stopped or gone) rank
    has not completed: it is held up too (the halted rank stopped inside a collective the others completed; some
    then wait in the next, others got through it and launched more), said in a note."""
    waits = _Waits([], "")
    for r in running:
        launched = r.launched or 0
        if launched >= top:
            continue
        # it waits in a collective it counted, else in one its stack shows (after the ones it counted)
        where = f"collective #{launched}" if r.in_collective else r.collective
        holders = [h.rank for h in halted if where and (h.completed or 0) < launched]
        if holders:
            waits.held[r.rank] = holders
            waits.notes.append(f"rank {r.rank} not named: it launched {launched} collective(s), the waiting ranks "
                               f"{top}, but it waits in {where}, and rank(s) {rank_list(holders)} (halted) did not "
                               f"complete collective #{launched}")
            continue
        waits.named.append(_why(r, f"it launched {launched} collective(s), the waiting ranks {top}"
                                   + (f"; it is in {r.frame}" if r.frame else ""),
                                (COUNT, *([r.stacks] if r.frame and r.stacks in ("py-spy", "faulthandler") else []))))
    return waits


def _why(row: RankHang, why: str, evidence: tuple[str, ...]) -> RankHang:
    return replace(row, why=why, evidence=evidence)


def _roots(flight: FlightAnalysis) -> dict[int, GroupFinding]:
    """Each root rank's first missed collective (the finding marked root that names it behind)."""
    found: dict[int, GroupFinding] = {}
    for finding in flight.findings:
        for rank in finding.behind if finding.root else []:
            if rank in flight.root_ranks:
                found.setdefault(rank, finding)
    return found


def _waits_for_roots(flight: FlightAnalysis, roots: dict[int, GroupFinding]) -> dict[int, GroupFinding]:
    """The ranks that entered a collective and wait in it for root ranks behind there (none root themselves)."""
    found: dict[int, GroupFinding] = {}
    for finding in flight.findings:
        if set(finding.behind) & set(roots):
            for site in finding.sites:
                if site.state == "entered" and site.rank not in roots:
                    found.setdefault(site.rank, finding)
    return found


def _with_flight(waited: list[RankHang], flight: FlightAnalysis, rows: dict[int, RankHang],
                 node_of: Mapping[int, str], held: Mapping[int, list[int]]) -> tuple[list[RankHang], list[str]]:
    """The ranks waited for with the Flight Recorder's evidence joined (its root ranks marked, or named where no
    other evidence named them; a rank named by its count alone that waits in a collective for root ranks dropped),
    and the notes on what was dropped. A root rank that waits in a collective a halted rank has not completed
    (`held`) is not named: a halted rank dumps nothing, so the recorder does not see that it is behind."""
    roots = _roots(flight)
    waits = _waits_for_roots(flight, roots)
    kept, notes = [], []
    for row in waited:
        if row.rank in roots:
            kept.append(replace(row, why=f"{row.why}; flight recorder: {roots[row.rank].why}",
                                evidence=(*row.evidence, FLIGHT)))
        elif row.evidence[:1] == (COUNT,) and row.rank in waits:
            finding = waits[row.rank]
            notes.append(f"rank {row.rank} not named: {row.why}, but its Flight Recorder shows it waiting in "
                         f"{finding.desc or finding.group} #{finding.seq} for rank(s) {rank_list(finding.behind)}")
        else:
            kept.append(row)
    named = {row.rank for row in kept}
    for rank, finding in sorted(roots.items()):
        if rank in held and rank not in named:
            notes.append(f"rank {rank} not named: the Flight Recorder has it behind ({finding.why}), but it waits in "
                         f"a collective rank(s) {rank_list(held[rank])} (halted, no dump) did not complete")
        elif rank not in named:
            base = rows.get(rank) or _missing_row(rank, node_of.get(rank))
            kept.append(replace(base, why=f"flight recorder: {finding.why}", evidence=(FLIGHT,)))
    return kept, notes


def find_hang(probes: list[tuple[str, RankProbe]], world: int | None = None, ras: list[RasStatus] | None = None,
              node_of: Mapping[int, str] | None = None, stall_s: float = STALL_S,
              flight: FlightAnalysis | None = None) -> HangReport:
    """The hang analysis of a job from (node, probe) pairs of every node probed; `world` the job's rank count
    (its step records' or its ranks' own), `ras` the RAS statuses asked on its nodes, `node_of` the engine's
    attribution of ranks to nodes (from the step records) for ranks no probe found, `flight` the analysis of the
    ranks' Flight Recorder dumps (evidence joined in a hang, as the module says). A rank no probe found is a row
    of its own where `node_of` places it; the others below `world` are named in the reason only, so a `world` of
    10^9 that a job's output claims costs nothing (never counted up to)."""
    node_of = node_of or {}
    newest: dict[int, tuple[str, RankProbe]] = {}
    for node, probe in probes:
        rank = probe.identity.rank
        if rank not in newest or probe.identity.started > newest[rank][1].identity.started:
            newest[rank] = (node, probe)
    kept = [newest[r] for r in sorted(newest)]
    suspects = [s for status in (ras or []) for s in ras_suspects(status, kept)]
    if not kept:
        return HangReport("not judged", "no rank state found on the job's nodes (is gpuval.hooks' StepTimer in the "
                                        "training loop, and were the job's nodes probed?)", ras=suspects)
    rows = [_rank_row(node, probe) for node, probe in kept]
    world = world or max(p.identity.world for _, p in kept)
    missing = [_missing_row(r, node) for r, node in sorted(node_of.items()) if r not in newest and 0 <= r < world]
    idle = [r.idle_s for r in rows if r.idle_s is not None]
    busy = [r.rank for r in rows if r.idle_s is not None and r.idle_s < stall_s and r.state != "gone"]
    report = HangReport("progressing", "", ranks=rows, ras=suspects,
                        stacks={p.identity.rank: p.stacks for _, p in kept if p.stacks is not None})
    if busy:
        report.reason = (f"not hung: rank(s) {rank_list(busy)} made progress within the last {stall_s:g} s "
                         f"(the longest idle: {max(idle):.0f} s)")
        return report
    waits = _waited_for(rows, kept)
    report.outcome, report.waited_for, report.notes = "hang", missing + waits.named, waits.notes
    recorder = ""
    if flight is not None and flight.root_ranks:
        report.waited_for, dropped = _with_flight(report.waited_for, flight, {r.rank: r for r in rows}, node_of,
                                                  waits.held)
        report.notes += dropped
        recorder = f"; the Flight Recorder names rank(s) {rank_list(flight.root_ranks)} behind"
    lead = f"no rank made progress for {min(idle):.0f} s" if idle else "no rank made progress"
    absent = absent_ranks(world, newest)
    stateless = f"; rank(s) {absent} have no state on any node" if absent else ""
    named_ras = {(s.host, s.pid) for s in suspects if s.severity == "error"}
    also = f"; RAS names {len(named_ras)} failing process(es)" if named_ras else ""
    report.reason = f"hang: {lead}; {waits.sentence}{stateless}{recorder}{also}"
    return report


_Pids = Mapping[int, list[tuple[int, str]]]  # pid -> (rank, node) of every probed rank with that pid


def _by_pid(kept: list[tuple[str, RankProbe]]) -> _Pids:
    found: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for node, p in kept:
        found[p.identity.pid].append((p.identity.rank, node))
    return found


def _rank_by_pid(pids: _Pids, pid: int | None) -> tuple[int | None, str]:
    """The probed rank with this pid, where exactly one has it (pids repeat across nodes), and its node."""
    match = pids.get(pid, []) if pid is not None else []
    return match[0] if len(match) == 1 else (None, "")


def _suspect(rank: RasRank, why: str, severity: Literal["error", "warning"], pids: _Pids) -> RasSuspect:
    found_rank, found_node = _rank_by_pid(pids, rank.pid)
    return RasSuspect(found_node, rank.host, rank.pid, found_rank, rank.rank, rank.gpu, why, severity)


def ras_suspects(status: RasStatus, kept: list[tuple[str, RankProbe]] | None = None) -> list[RasSuspect]:
    """The processes a RAS status names, placed on the job's nodes and ranks by pid where a probe has it: from the
    text's findings in RAS's words, or from the JSON's raw flags (dead, unresponsive, aborted, init or async error,
    behind in operation counts)."""
    pids = _by_pid(kept or [])
    found: list[RasSuspect] = []
    for finding in status.findings:
        severity = "warning" if finding.kind == "MISMATCH" or finding.severity == "warning" else "error"
        for process in finding.processes:
            rank, where = _rank_by_pid(pids, process.pid)
            found.append(RasSuspect(where, process.host, process.pid, rank, None, None,
                                    f"{finding.kind}: {finding.summary}", severity))
        found += [_suspect(r, f"{finding.kind} {finding.communicator}: {r.note or finding.summary}".strip(),
                           severity, pids) for r in finding.ranks]
    for comm in status.communicators:
        for r in comm.missing:
            if r.considered_dead or r.unresponsive:
                state = "considered dead" if r.considered_dead else "unresponsive"
                found.append(_suspect(r, f"communicator {comm.hash}: {state}", "error", pids))
        found += _flagged_ranks(comm.hash, comm.ranks, pids)
    return found


def _flagged_ranks(comm: str, ranks: list[RasRank], pids: _Pids) -> list[RasSuspect]:
    """A JSON communicator's responding ranks that say something is wrong, or that are behind in a count."""
    found = []
    for r in ranks:
        if r.abort_flag:
            found.append(_suspect(r, f"communicator {comm}: aborted", "error", pids))
        if r.init_state not in (None, 0, 7):
            found.append(_suspect(r, f"communicator {comm}: initialisation error {r.init_state}", "error", pids))
        if r.async_error not in (None, 0, 7):
            found.append(_suspect(r, f"communicator {comm}: asynchronous error {r.async_error}", "error", pids))
    for op in sorted({op for r in ranks for op in r.counts}):
        top = max(r.counts.get(op, 0) for r in ranks)
        found += [_suspect(r, f"communicator {comm}: launched {op} {r.counts.get(op, 0)} of {top}", "warning", pids)
                  for r in ranks if r.counts.get(op, 0) < top]
    return found
