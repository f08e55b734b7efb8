"""Where the ranks of a hung job part ways, per process group, from every rank's PyTorch Flight Recorder dump
(gpuval.node.flight_dump; had on each node by gpuval.node.flight_recorder). Pure: dumps in, findings out.

The rules follow torch's own analyser (torch.distributed.flight_recorder: `fr_trace`, `components/builder.py` and
`utils.py`): a process group's collectives carry a sequence number that every member counts alike, so the members'
records are set side by side by it, one group at a time, point-to-point operations aside; the members are the
group's ranks as the dumps' `pg_config` gives them (NCCL), else the ranks whose dumps hold the group (gloo records
no `pg_config`); a collective is the same on two ranks when its operation, sizes and dtypes agree, with torch's
exceptions (all_to_all's sizes differ per rank, gather's output and scatter's input exist on the root only). Per
group, the first sequence number where the members disagree:
- `not entered by all`: some members entered it and others have not (the latter are behind; a member whose dump
  holds no collective of the group counts as behind: an only-active dump leaves out what completed);
- `mismatch`: all entered it, with different operations, sizes or dtypes (the odd ones out are named);
- `not completed by all`: all entered the last one, some completed it and others have not;
- `all waiting` (kept apart as `stuck`: no disagreement): all entered the last one and none completed it, so no
  member is behind; where no group has a finding, the collective itself does not finish (the network, a GPU,
  NCCL); beside findings, such groups mostly wait on them.
Completion is NCCL's event state where the entries carry it, else the group's `last_completed_collective` (gloo).

Across groups: a member that entered a collective and waits in it (not completed) waits for the members behind
there. The ranks at the end of those waits (in a group of ranks that wait only for each other: one rank that waits
for nobody, or a desync where two wait for each other) are the root; each root rank's first finding is marked
`root`: the collective it missed first, in program order where a rank shows it (it entered one and is behind in
the other: it ran that one first), else by when the others entered it. Torch's analyser reports the
first mismatch; NVIDIA's fr_attribution the groups at the wavefront; on NVRx's recorded fault-injection dumps these
rules name the same group and ranks (tests/diagnosis/test_flight.py).

Read this for a job that made no progress between the ranks' dumps (a hang): dumps of a running job are taken at
slightly different moments and differ by the collectives run in between. Times are the ranks' own clocks.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, Mapping

from pydantic import BaseModel, Field

from gpuval.diagnosis.job_records import rank_list
from gpuval.node.flight_dump import FrDump, FrEntry, FrFrame

Kind = Literal["not entered by all", "mismatch", "not completed by all", "all waiting"]
GroupKey = tuple[str, tuple[int, ...]]  # (name, ranks from pg_config; () where no dump gives them)
# torch's Op.match: the sizes or dtypes that may differ between members for these operations
NO_INPUT_SIZES = frozenset({"all_to_all", "scatter"})
NO_OUTPUT_SIZES = frozenset({"all_to_all", "gather"})
NO_INPUT_DTYPES = frozenset({"scatter", "broadcast"})
NO_OUTPUT_DTYPES = frozenset({"gather"})
NO_DUMP_LISTED = 1024  # ranks without a dump listed by number; past them only counted (a world a job claims is
# never counted up to)


class RankSite(BaseModel):
    """One member of a group at the finding's collective: whether it entered it, the collective of this group its
    frames are from (that one, else its last), and for a member behind, where it waits instead."""

    rank: int
    state: Literal["completed", "entered", "not entered", "no dump"]
    seq: int | None = None
    op: str = ""
    input_sizes: list[list[int]] = Field(default_factory=list)
    output_sizes: list[list[int]] = Field(default_factory=list)
    call_site: str = ""  # its innermost frame outside torch; '' where the dump holds no frames
    frames: list[FrFrame] = Field(default_factory=list)
    waiting_in: str = ""  # behind: the newest collective it entered and has not completed, in any group

    def describe(self) -> str:
        """The member in one line: `rank 1: not entered (its last: #3 gloo:all_reduce [[64, 4]]) at f (x.py:3)`."""
        if self.seq is None:
            return f"rank {self.rank}: {self.state}" + (f"; waits in {self.waiting_in}" if self.waiting_in else "")
        last = "" if self.state in ("entered", "completed") else "its last: "
        what = f"{last}#{self.seq} {self.op}" + (f" {self.input_sizes}" if self.input_sizes else "")
        return f"rank {self.rank}: {self.state} ({what})" + (f" at {self.call_site}" if self.call_site else "") + \
            (f"; waits in {self.waiting_in}" if self.waiting_in else "")


class GroupFinding(BaseModel):
    """A process group's first collective where its members disagree."""

    group: str
    desc: str
    members: list[int]
    members_from: Literal["pg_config", "dumps"]
    kind: Kind
    seq: int
    op: str
    input_sizes: list[list[int]] = Field(default_factory=list)
    output_sizes: list[list[int]] = Field(default_factory=list)
    dtypes: list[str] = Field(default_factory=list)
    entered: list[int]
    behind: list[int]  # not entered / not completed / the odd ones out of a mismatch
    no_dump: list[int] = Field(default_factory=list)
    since_ns: int | None = None  # when the first member entered it (its clock)
    root: bool = False
    sites: list[RankSite] = Field(default_factory=list)
    why: str = ""


class FlightAnalysis(BaseModel):
    """Every group's finding, the earliest first; the root ranks; groups whose members all wait in their last
    collective; groups whose dumps agree; ranks without a dump (the first NO_DUMP_LISTED) and how many."""

    findings: list[GroupFinding] = Field(default_factory=list)
    root_ranks: list[int] = Field(default_factory=list)
    stuck: list[GroupFinding] = Field(default_factory=list)
    agreeing: list[str] = Field(default_factory=list)
    no_dump: list[int] = Field(default_factory=list)
    no_dump_total: int = 0

    def to_json(self) -> dict:
        """The analysis as plain JSON."""
        return self.model_dump(mode="json")


@dataclass
class _Track:
    """One rank's record of one group: its collectives by sequence number, how far it entered and completed."""

    pg_id: int
    by_seq: dict[int, FrEntry] = field(default_factory=dict)
    p2p: bool = False
    entered: int = -1
    completed: int | None = None


def _config_ranks(dump: FrDump, name: str) -> tuple[int, ...]:
    config = dump.pg_config.get(name)
    return tuple(sorted(config.ranks)) if config and config.ranks else ()


def _tracks(dumps: Mapping[int, FrDump]) -> tuple[dict[GroupKey, dict[int, _Track]], dict[GroupKey, str]]:
    """Every rank's track of every group it recorded, and each group's description."""
    tracks: dict[GroupKey, dict[int, _Track]] = {}
    descs: dict[GroupKey, str] = {}
    for rank, dump in dumps.items():
        for entry in sorted(dump.entries, key=lambda e: e.record_id):
            name, desc = entry.process_group
            key = (name, _config_ranks(dump, name))
            descs.setdefault(key, desc)
            track = tracks.setdefault(key, {}).setdefault(rank, _Track(entry.pg_id))
            if entry.is_p2p:
                track.p2p = True
            else:
                track.by_seq[entry.collective_seq_id] = entry  # a coalesced call: its last entry
        for key, by_rank in tracks.items():
            track = by_rank.get(rank)
            if track is None or not track.by_seq:
                continue
            track.entered = max(track.by_seq)
            done = [seq for seq, e in track.by_seq.items() if e.completed]
            status = dump.pg_status.get(str(track.pg_id))
            if status is not None and not track.p2p:  # the group's own count (gloo's only one)
                track.completed = min(status.last_completed_collective, track.entered)
            elif done or not track.p2p:  # its events; with p2p in the group and none completed: not known
                track.completed = max(done, default=-1)
    kept = {k: {r: t for r, t in v.items() if t.by_seq} for k, v in tracks.items()}
    return {k: v for k, v in kept.items() if v}, descs


def _signature(entry: FrEntry) -> tuple:
    """What must agree between members for one collective (torch's Op.match), hashable."""
    op = entry.op
    if op.endswith("coalesced"):
        return (op,)
    return (op, None if op in NO_INPUT_SIZES else tuple(map(tuple, entry.input_sizes)),
            None if op in NO_OUTPUT_SIZES else tuple(map(tuple, entry.output_sizes)),
            None if op in NO_INPUT_DTYPES else tuple(sorted(set(entry.input_dtypes))),
            None if op in NO_OUTPUT_DTYPES else tuple(sorted(set(entry.output_dtypes))))


def _first_mismatch(tracks: dict[int, _Track], upto: int) -> tuple[int, list[int]] | None:
    """The first sequence number (at most `upto`, held by every member's buffer) where the members' collectives
    differ, with the odd ones out (all that differ from the most common, every one on a tie)."""
    common = set.intersection(*(set(t.by_seq) for t in tracks.values()))
    for seq in sorted(s for s in common if s <= upto):
        signatures = {rank: _signature(t.by_seq[seq]) for rank, t in tracks.items()}
        counts = Counter(signatures.values()).most_common()
        if len(counts) > 1:
            tie = counts[0][1] == counts[1][1]
            return seq, sorted(r for r, s in signatures.items() if tie or s != counts[0][0])
    return None


def call_site(frames: list[FrFrame]) -> str:
    """The innermost frame outside torch's package (the program's own line), else the innermost; '' for none."""
    outside = [f for f in frames if "/torch/" not in f.filename]
    return (outside or frames)[0].where() if frames else ""


def _waiting_in(tracks: dict[GroupKey, dict[int, _Track]], descs: dict[GroupKey, str]) -> dict[int, str]:
    """Per rank, the newest collective it entered and has not completed, in any group (none known: absent)."""
    newest: dict[int, tuple[FrEntry, GroupKey]] = {}
    for key, by_rank in tracks.items():
        for rank, track in by_rank.items():
            if track.completed is None or track.completed >= track.entered:
                continue
            entry = track.by_seq[track.entered]
            if rank not in newest or entry.record_id > newest[rank][0].record_id:
                newest[rank] = (entry, key)
    waits = {}
    for rank, (entry, key) in newest.items():
        where = call_site(entry.frames)
        waits[rank] = f"{descs[key] or key[0]} #{entry.collective_seq_id} {entry.profiling_name}" + \
            (f" at {where}" if where else "")
    return waits


def _site(rank: int, seq: int, track: _Track | None, behind: bool, waiting: str) -> RankSite:
    """A member at collective `seq` of its group."""
    if track is None:
        return RankSite(rank=rank, state="not entered", waiting_in=waiting if behind else "")
    entry = track.by_seq.get(seq) or track.by_seq[track.entered]
    state = ("completed" if track.completed is not None and track.completed >= seq else "entered") \
        if seq in track.by_seq else "not entered"
    return RankSite(rank=rank, state=state, seq=entry.collective_seq_id, op=entry.profiling_name,
                    input_sizes=entry.input_sizes, output_sizes=entry.output_sizes, call_site=call_site(entry.frames),
                    frames=entry.frames, waiting_in=waiting if behind else "")


def _describe(kind: Kind, name: str, seq: int, op: str, entered: list[int], behind: list[int]) -> str:
    """The finding in one line for people."""
    if kind == "not entered by all":
        return (f"{name}: rank(s) {rank_list(entered)} entered collective #{seq} ({op}); rank(s) "
                f"{rank_list(behind)} did not")
    if kind == "mismatch":
        return f"{name}: collective #{seq} differs between members (operation, sizes or dtypes): rank(s) " \
               f"{rank_list(behind)} called another than the rest"
    if kind == "not completed by all":
        return f"{name}: every member entered collective #{seq} ({op}); rank(s) {rank_list(behind)} did not " \
               "complete it"
    return f"{name}: every member entered collective #{seq} ({op}) and none completed it: no member is behind, " \
           "the collective itself does not finish"


def _judge(by_rank: dict[int, _Track], members: list[int], dumped: set[int]) -> tuple[Kind, int, list[int]] | None:
    """A group's first disagreement: its kind, sequence number and the members behind; None where they agree (or
    nothing tells)."""
    missing = [m for m in members if m in dumped and m not in by_rank]
    entered = {r: t.entered for r, t in by_rank.items()}
    low, high = min(entered.values()), max(entered.values())
    mismatch = _first_mismatch(by_rank, low) if len(by_rank) > 1 else None
    if low < high or missing:
        seq = low + 1 if low < high else high
        if mismatch and mismatch[0] < seq:
            return "mismatch", mismatch[0], mismatch[1]
        return "not entered by all", seq, sorted([r for r, v in entered.items() if v < seq] + missing)
    if mismatch:
        return "mismatch", mismatch[0], mismatch[1]
    done = {r: t.completed for r, t in by_rank.items() if t.completed is not None}
    late = sorted(r for r, c in done.items() if c < high)
    if len(done) < len(by_rank) or not late:  # a member's completion not known, or all completed
        return None
    return ("not completed by all", high, late) if len(late) < len(done) else ("all waiting", high, [])


def _finding(key: GroupKey, desc: str, by_rank: dict[int, _Track], dumps: Mapping[int, FrDump],
             waits: dict[int, str]) -> GroupFinding | None:
    """One group's finding, with every member's site; None where the members agree."""
    members = list(key[1]) or sorted(by_rank)
    judged = _judge(by_rank, members, set(dumps)) if len(members) > 1 else None
    if judged is None:
        return None
    kind, seq, behind = judged
    at_seq = {r: t.by_seq[seq] for r, t in by_rank.items() if seq in t.by_seq}
    entered = sorted(at_seq) if kind == "not entered by all" else sorted(by_rank)
    first = min(at_seq.values(), key=lambda e: e.time_created_ns) if at_seq else None
    sites = [RankSite(rank=m, state="no dump") if m not in dumps else
             _site(m, seq, by_rank.get(m), m in behind, waits.get(m, "")) for m in members]
    sizes = {tuple(map(tuple, e.input_sizes)) for e in at_seq.values()}
    name = f"{desc or 'group'} ({key[0]})"
    return GroupFinding(
        group=key[0], desc=desc, members=members, members_from="pg_config" if key[1] else "dumps", kind=kind,
        seq=seq, op=first.profiling_name if first else "", dtypes=first.input_dtypes if first else [],
        input_sizes=first.input_sizes if first and len(sizes) == 1 else [],
        output_sizes=first.output_sizes if first and len(sizes) == 1 else [],
        entered=entered, behind=behind, no_dump=[m for m in members if m not in dumps],
        since_ns=first.time_created_ns if first else None, sites=sites,
        why=_describe(kind, name, seq, first.profiling_name if first else "", entered, behind))


def _sink_components(edges: dict[int, set[int]]) -> set[int]:
    """The nodes of the strongly connected components no edge leaves (Tarjan's algorithm, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    component: dict[int, int] = {}
    stack: list[int] = []
    nodes = sorted(set(edges) | {w for targets in edges.values() for w in targets})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                    break
                if target not in component:  # on the stack
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        component[member] = node
                        if member == node:
                            break
    leaving = {component[n] for n in nodes for w in edges.get(n, ()) if component[w] != component[n]}
    return {n for n in nodes if component[n] not in leaving}


def _mark_roots(found: list[tuple[GroupFinding, dict[int, _Track]]]) -> list[int]:
    """The root ranks (see the module's text); marks each root rank's earliest finding."""
    entered = [(f, by_rank) for f, by_rank in found if f.kind == "not entered by all"]
    edges: dict[int, set[int]] = {}
    for finding, by_rank in entered:
        for rank in finding.entered:
            done = by_rank[rank].completed
            if done is None or done < finding.seq:  # it waits there for those behind
                edges.setdefault(rank, set()).update(finding.behind)
    behind = {r for f, _ in entered for r in f.behind}
    roots = sorted(_sink_components(edges) & behind) if edges else sorted(behind)
    for rank in roots:
        naming = [f for f, _ in entered if rank in f.behind]
        # program order first: a rank that entered one of them and is behind in another ran that one first
        first = [f for f in naming if not any(set(g.entered) & set(f.behind) for g in naming if g is not f)]
        min(first or naming, key=lambda f: (f.since_ns is None, f.since_ns or 0)).root = True
    return roots


def analyze_dumps(dumps: Mapping[int, FrDump], world: int | None = None) -> FlightAnalysis:
    """Every process group's first disagreement across the ranks' dumps (rank -> its dump), the root ranks and
    their first missed collective. `world`: the job's size, to name the ranks without a dump (never counted up to:
    a world a job's output claims may be any number)."""
    tracks, descs = _tracks(dumps)
    waits = _waiting_in(tracks, descs)
    found, agreeing = [], []
    for key in sorted(tracks, key=lambda k: (len(k[0]), k)):
        finding = _finding(key, descs[key], tracks[key], dumps, waits)
        if finding is None:
            agreeing.append(f"{descs[key] or 'group'} ({key[0]})")
        else:
            found.append((finding, tracks[key]))
    roots = _mark_roots(found)
    ordered = sorted((f for f, _ in found), key=lambda f: (f.since_ns is None, f.since_ns or 0, f.group))
    size = world or 0
    missing = (rank for rank in range(size) if rank not in dumps)  # taken lazily: at most NO_DUMP_LISTED past dumps
    no_dump = list(itertools.islice(missing, NO_DUMP_LISTED))
    total = size - sum(1 for rank in dumps if 0 <= rank < size)
    return FlightAnalysis(findings=[f for f in ordered if f.kind != "all waiting"], root_ranks=roots,
                          stuck=[f for f in ordered if f.kind == "all waiting"], agreeing=agreeing, no_dump=no_dump,
                          no_dump_total=total)
