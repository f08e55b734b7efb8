"""What a diagnosis keeps of a job's output: read once, streaming, each line cut before anything reads it; each
rank's first and last step records and each node's first NCCL lines, and no more (reliability-4 D10, red team 5
N4).

Every bound is counted on what the diagnosis holds, per node of the job and in all, never on what the output
claims: a line's place is the node the engine ties it to, else the node where a probe found its rank (a record) or
its process (an NCCL line's pid); lines neither places share one place, the job's. The places are thus the job's
nodes and one more, whatever ranks, pids or hosts the lines name. Bytes are counted as Python holds them: the text
(`sys.getsizeof`, its characters' width included) and ENTRY_BYTES for its entry.

- A record is kept as the timer writes it (`StepRecord.to_line` of its fields: padding, unknown fields and a
  launcher's prefix are not kept), at most RECORD_BYTES (the timer's own limit: a longer one is none the timer
  wrote). Each rank kept holds at most RANK_BYTES (its first RECORDS_FIRST and last RECORDS_LAST records, their
  entries and its containers), so at most NODE_RANKS ranks a place and MAX_RANKS in all bound the records by
  construction: 3.1 MiB a place, 794 MiB in all (reached only by a job that places 32,768 ranks over 256 of its
  nodes or more).
- The ranks whose records were left out are counted, their ids held up to job_records.LEFT_COUNTED (under 3 MiB):
  a rule's "none" over the ranks kept is then "not judged" (a verdict on some ranks is none on the job).
- A place's first NCCL lines (its network is set up first): at most NCCL_NODE_LINES and NCCL_NODE_BYTES a place,
  NCCL_BYTES in all.

What is left out is counted and said in the diagnosis's notes, never silently.
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from gpuval.diagnosis import job_records, job_transport, straggler
from gpuval.hooks.record import MAX_BYTES, read_line

LINE_CHARS = 4096  # of any line, cut before anything reads it (a record, a piece, an NCCL line is under 1 KiB)
ENTRY_BYTES = 100  # what Python holds for a kept line besides its text: its tuple and its place in the output
RECORDS_FIRST = 10  # a rank's first step records: its early windows, which a straggler's own history is set against
RECORDS_LAST = straggler.RECENT + 2  # and its last: the windows a verdict is drawn from
RECORD_BYTES = MAX_BYTES  # a record as the timer writes it
RANK_CONTAINERS = 1024  # what a kept rank holds besides its records' entries: its list, its deque and its slot
RANK_BYTES = (RECORDS_FIRST + RECORDS_LAST) * (sys.getsizeof("x" * RECORD_BYTES) + ENTRY_BYTES) + RANK_CONTAINERS
NODE_RANKS = 128  # ranks whose records a place keeps (a GPU node runs 4 or 8; a CPU node's ranks may be more)
MAX_RANKS = 32_768  # in all (a 4,096-node job of 8 GPUs each)
NCCL_NODE_LINES = 4_096  # a place's first NCCL lines: its set-up, which names the network
NCCL_NODE_BYTES = 1 << 20
NCCL_BYTES = 64 << 20  # in all

Entry = tuple[int, "str | None", str]  # (its place in the output, the node the engine said, the line)


@dataclass
class JobOutput:
    """The lines kept, in the output's order, each with the node the engine tied it to; and what was left out."""

    lines: list[tuple[str | None, str]]
    notes: list[str] = field(default_factory=list)
    ranks_left: int = 0  # ranks whose records were left out (past a place's NODE_RANKS or the job's MAX_RANKS)


def _held(line: str) -> int:
    return sys.getsizeof(line) + ENTRY_BYTES


@dataclass(slots=True)
class _Rank:
    first: list[Entry] = field(default_factory=list)
    last: deque[Entry] = field(default_factory=lambda: deque(maxlen=RECORDS_LAST))


class Keeper:
    """The lines a diagnosis keeps, fed one at a time (`add`). `ranks_at` and `pids_at`: where the probes found each
    rank and each process (rank -> node, pid -> node), which place a line the engine ties to no node."""

    def __init__(self, ranks_at: Mapping[int, str] | None = None, pids_at: Mapping[int, str] | None = None) -> None:
        self.ranks_at, self.pids_at = ranks_at or {}, pids_at or {}
        self.ranks: dict[int, _Rank] = {}
        self.place_ranks: Counter[str | None] = Counter()
        self.nccl: list[Entry] = []
        self.nccl_lines: Counter[str | None] = Counter()
        self.nccl_bytes: Counter[str | None] = Counter()
        self.nccl_total = 0
        self.left: Counter[str] = Counter()  # what was left out, by why
        self.left_at: dict[str, set[str | None]] = {}  # and where (places: the job's nodes and one more)
        self.ranks_left: set[int] = set()  # whose records were left out, at most LEFT_COUNTED

    def add(self, at: int, node: str | None, raw: str) -> None:
        """Line number `at` of the output, tied by the engine to `node` (None: no node)."""
        line = raw[:LINE_CHARS]
        if job_records.MARK in line:
            self._record(at, node, line)
        elif job_transport.MARK in line:
            self._nccl(at, node, line)

    def _leave(self, why: str, place: str | None) -> None:
        self.left[why] += 1
        self.left_at.setdefault(why, set()).add(place)

    def _record(self, at: int, node: str | None, line: str) -> None:
        found = read_line(line)
        if found is None:
            return
        place = node or self.ranks_at.get(found.rank)
        rank = self.ranks.get(found.rank)
        if rank is None:
            if self.place_ranks[place] >= NODE_RANKS or len(self.ranks) >= MAX_RANKS:
                self._leave(f"records of ranks past a node's first {NODE_RANKS:,} (or the job's {MAX_RANKS:,})",
                            place)
                if len(self.ranks_left) < job_records.LEFT_COUNTED:
                    self.ranks_left.add(found.rank)
                return
            self.place_ranks[place] += 1
            rank = self.ranks[found.rank] = _Rank()
        kept = found.to_line()
        if len(kept) > RECORD_BYTES:
            self._leave("records longer than the timer writes", place)
            return
        (rank.first if len(rank.first) < RECORDS_FIRST else rank.last).append((at, node, kept))

    def _nccl(self, at: int, node: str | None, line: str) -> None:
        place = job_transport.nccl_node(node, line, self.pids_at)
        held = _held(line)
        if (self.nccl_lines[place] >= NCCL_NODE_LINES or self.nccl_bytes[place] + held > NCCL_NODE_BYTES
                or self.nccl_total + held > NCCL_BYTES):
            self._leave(f"NCCL lines past a node's first {NCCL_NODE_LINES:,} or {NCCL_NODE_BYTES >> 20} MiB (or the "
                        f"job's {NCCL_BYTES >> 20} MiB)", place)
            return
        self.nccl_lines[place] += 1
        self.nccl_bytes[place] += held
        self.nccl_total += held
        self.nccl.append((at, node, line))

    def output(self) -> JobOutput:
        """What was kept, in the output's order, and a note for each kind of line left out."""
        records = [e for rank in self.ranks.values() for e in (*rank.first, *rank.last)]
        lines = [(node, line) for _, node, line in sorted([*self.nccl, *records], key=lambda e: e[0])]
        notes = [f"{count:,} {why} not read ({_places(self.left_at[why])})" for why, count in self.left.items()]
        return JobOutput(lines, notes, len(self.ranks_left))


def _places(places: set[str | None]) -> str:
    named = sorted(p for p in places if p is not None)
    shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more node(s)" if len(named) > 8 else "")
    unplaced = "lines no node places" if None in places else ""
    return "; ".join(part for part in (f"on {shown}" if shown else "", unplaced) if part)


def keep(pairs: Iterable[tuple[str | None, str]], ranks_at: Mapping[int, str] | None = None,
         pids_at: Mapping[int, str] | None = None) -> JobOutput:
    """The (node, line) pairs of a job's output (`Engine.node_lines`) as a diagnosis keeps them (`Keeper`)."""
    keeper = Keeper(ranks_at, pids_at)
    for at, (node, raw) in enumerate(pairs):
        keeper.add(at, node, raw)
    return keeper.output()
