"""PyTorch Flight Recorder dumps in a job's diagnosis: had on each node by its probe, for the ranks the probe took
as the job's (gpuval.node.rank_probe: never a record it passed over), carried in the node's answer cut to fit, and
gathered from every node into one {rank: dump} for the analysis (gpuval.diagnosis.flight).

On a node (`node_dumps`), only where none of the job's ranks there made progress for the hang's stall time: a dump
costs a rank seconds (torch symbolizes its frames), and dumps of a running job differ by the collectives between
them, so a job that progresses is not asked. Then, with the places each rank's environment names (as the probe read
it) and gpuval's stem in the owner's checked hooks folder (`dump_stem(folder, job)`):
- a running rank is asked through its pipe (gpuval.node.flight_recorder.collect_rank_dumps), the dumps awaited
  together;
- a stopped rank (it cannot dump: its pipe's thread does not run) and a rank whose process is gone have the dump
  they wrote before read (torch's at a watchdog timeout, or an earlier request), written since the job started;
- a rank with a dump at the job's stem and no state file here (its process and state are gone: `dumped_ranks`)
  likewise, at most MAX_DUMPS a node.
Each dump is cut as soon as it is read (FrDump.compact: each group's last collectives, frames on the last few).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.diagnosis.job_records import rank_list
from gpuval.node.flight_dump import FrDump
from gpuval.node.flight_recorder import DumpRequest, RankDump, collect_rank_dumps, dump_stem, dumped_ranks
from gpuval.node.rank_probe import RankProbe, RankScan

MAX_DUMPS = 64  # dumps of ranks without a state file read on one node (a node runs a few ranks: 8 GPUs)
FULL = (16, 4, 24)  # FrDump.compact's keep, frames_of, max_frames: what a node's answer carries of each dump
LIGHT = (4, 1, 8)  # and where the answer would be too long: the analysis reads the last few collectives of a group


def _full(dump: FrDump) -> FrDump:
    return dump.compact(*FULL)


def lighter(dump: RankDump) -> RankDump:
    """A rank's dump cut to LIGHT (for an answer that would be too long)."""
    return dump.model_copy(update={"dump": dump.dump.compact(*LIGHT)}) if dump.dump is not None else dump


def left_out(dump: RankDump, said: str) -> RankDump:
    """A rank's dump left out of the answer, said in its note."""
    if dump.dump is None:
        return dump
    return dump.model_copy(update={"dump": None, "note": "; ".join(filter(None, [dump.note, f"dump {said}"]))})


def _requests(scan: RankScan, job: str | None, uid: int) -> tuple[list[DumpRequest], list[DumpRequest], int]:
    """(the ranks to ask through their pipes, the ranks whose earlier dumps are read, how many dumped ranks were
    left past MAX_DUMPS): each rank once, its newest process."""
    newest: dict[int, RankProbe] = {}
    for probe in scan.ranks:  # sorted by rank, the newest process first
        newest.setdefault(probe.identity.rank, probe)
    folder = scan.folder
    if folder is None:
        return [], [], 0
    asked: list[DumpRequest] = []
    read: list[DumpRequest] = []
    for rank, probe in newest.items():
        request = DumpRequest(rank, scan.places.get(probe.identity.pid, {}), dump_stem(folder, probe.identity.job),
                              uid)
        (asked if probe.running else read).append(request)
    jobs = [job] if job is not None else sorted({p.identity.job for p in newest.values()})
    seen, kept, past = set(newest), 0, 0
    for stem in (dump_stem(folder, j) for j in jobs):
        for rank in dumped_ranks(stem, uid):
            if rank in seen:
                continue
            seen.add(rank)
            if kept >= MAX_DUMPS:
                past += 1
                continue
            kept += 1
            read.append(DumpRequest(rank, {}, stem, uid))
    return asked, read, past


def node_dumps(scan: RankScan, job: str | None, since: float | None, stall_s: float, wait_s: float,
               uid: int) -> tuple[list[RankDump], str]:
    """The Flight Recorder dumps of the job's ranks on this node, as the module says, and what keeps a part from
    being had ('' when nothing does); none while a rank here made progress within `stall_s`."""
    busy = [p.identity.rank for p in scan.ranks if p.state != "gone" and p.idle_s() < stall_s]
    if busy:
        return [], ""
    asked, read, past = _requests(scan, job, uid)
    got = collect_rank_dumps(asked, since, ask=True, wait_s=wait_s, cut=_full) if asked else []
    got += collect_rank_dumps(read, since, ask=False, cut=_full) if read else []
    return got, f"{past} more rank(s) with a dump at the job's stem left unread" if past else ""


@dataclass
class JobDumps:
    """Every node's dumps of the job: each rank's newest, where it came from ("d1: asked through its pipe"), and
    per node the ranks without one and the first reason."""

    dumps: dict[int, FrDump] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


_HOW = {"pipe": "asked through its pipe", "timeout": "written before (at a timeout or an earlier request)"}


def job_dumps(per_node: list[tuple[str, list[RankDump], str]]) -> JobDumps:
    """The dumps of (node, its dumps, its problem) triples, as `JobDumps` holds them: a rank dumped on two nodes
    (a restarted rank) by its newest dump."""
    found = JobDumps()
    when: dict[int, float] = {}
    for node, dumps, problem in per_node:
        missing: dict[int, str] = {}
        for got in dumps:
            if got.dump is None:
                missing[got.rank] = got.note
                continue
            at = got.dumped_at or 0.0
            if got.rank not in when or at > when[got.rank]:
                when[got.rank] = at
                found.dumps[got.rank] = got.dump
                found.sources[got.rank] = f"{node}: {_HOW.get(got.source, got.source)}"
        if missing:
            first = next(iter(missing.values()))
            found.notes.append(f"{node}: Flight Recorder: no dump of rank(s) {rank_list(missing)}: {first[:300]}")
        if problem:
            found.notes.append(f"{node}: Flight Recorder: {problem}")
    return found
