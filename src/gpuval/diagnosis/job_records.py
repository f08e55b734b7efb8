"""A job's step records (gpuval.hooks.record) read from its output as the engine attributes it, line by line to the
node that printed it: which rank ran on which node, by the engine's word rather than the process's claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from gpuval.hooks.record import PREFIX, StepRecord, read_line

MARK = PREFIX.strip()  # in every step record's line: a line without it is none


@dataclass
class JobRecords:
    """The step records of a job and where each rank ran. `node_of`: rank -> the node whose output carried its
    records (the latest one, where a rank moved: a restart); `notes` says where that or a process's own host name
    disagrees."""

    records: list[StepRecord] = field(default_factory=list)
    node_of: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _ranks: dict[tuple[str | None, int], int] | None = field(default=None, repr=False, compare=False)

    def latest(self) -> dict[int, StepRecord]:
        """Each rank's newest record (by the end of its window)."""
        newest: dict[int, StepRecord] = {}
        for record in self.records:
            if record.rank not in newest or record.t1 >= newest[record.rank].t1:
                newest[record.rank] = record
        return newest

    def rank_of(self, node: str, pid: int) -> int | None:
        """The rank whose process `pid` printed records on `node` (None: no record says so); looked up in an index
        made at the first call, so naming every rank of a large job is linear."""
        if self._ranks is None:
            self._ranks = {}
            for record in self.records:
                self._ranks.setdefault((self.node_of.get(record.rank), record.pid), record.rank)
        return self._ranks.get((node, pid))

    def world(self) -> int:
        """The job's world size as its records say (0 without records)."""
        return max((r.world for r in self.records), default=0)


def read_job_records(lines: Iterable[tuple[str | None, str]], placed: Mapping[int, str] | None = None) -> JobRecords:
    """Step records from (node, line) pairs (Engine.node_lines); lines that are no record are passed over. A line
    the engine ties to no node (None: an unlabelled output) is placed by `placed`, rank -> the node where a probe
    the engine ran there found the rank; a rank neither names is left without a node (and said)."""
    found = JobRecords()
    seen_on: dict[int, tuple[float, str]] = {}
    unplaced: set[int] = set()
    for node, line in lines:
        if MARK not in line:
            continue
        record = read_line(line)
        if record is None:
            continue
        found.records.append(record)
        node = node or (placed or {}).get(record.rank)
        if node is None:
            unplaced.add(record.rank)
            continue
        before = seen_on.get(record.rank)
        if before is not None and before[1] != node:
            found.notes.append(f"rank {record.rank}'s records came from {before[1]} and from {node}")
        if before is None or record.t1 >= before[0]:
            seen_on[record.rank] = (record.t1, node)
    found.node_of = {rank: node for rank, (_, node) in sorted(seen_on.items())}
    if unplaced - set(found.node_of):
        found.notes.append(f"rank(s) {rank_list(unplaced - set(found.node_of))}: neither the engine nor a probe "
                           "names their node (named by the host the process reports)")
    differ: dict[tuple[str, str], set[int]] = {}
    for record in found.records:
        node = found.node_of.get(record.rank)
        if node and record.host and record.host.split(".")[0] != node.split(".")[0]:
            differ.setdefault((record.host, node), set()).add(record.rank)
    for (host, node), ranks in sorted(differ.items()):
        found.notes.append(f"rank(s) {rank_list(ranks)} call their host {host!r}; their lines are attributed "
                           f"to {node}")
    found.notes = list(dict.fromkeys(found.notes))
    return found


LEFT_COUNTED = 32_768  # ranks left out of what a diagnosis keeps are counted up to this many (their ids are held)


def left_out(ranks: int) -> str:
    """Why a rule's "none" over the ranks a diagnosis kept is no verdict on the job: `ranks` of it were left out
    (workloads/diagnose/output.py's bounds; counted up to LEFT_COUNTED)."""
    more = " or more" if ranks >= LEFT_COUNTED else ""
    return f"the records of {ranks:,}{more} rank(s) were left out (a diagnosis keeps a node's first ranks)"


RUNS_SHOWN = 32  # runs of ranks a list for people names; a job of 10,000 scattered ranks is one line still


def rank_list(ranks: Iterable[int]) -> str:
    """Ranks for people: runs joined, `0-7, 9, 12-13`; past RUNS_SHOWN runs, how many more ranks."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return _runs_text([(first, last) for first, last in runs])


def absent_ranks(world: int, present: Iterable[int]) -> str:
    """The ranks below `world` that are not in `present`, as `rank_list` writes them, found from `present` alone:
    a world of 10^9 that a job's output claims costs nothing (never counted up to)."""
    runs: list[tuple[int, int]] = []
    start = 0
    for rank in sorted(r for r in set(present) if 0 <= r < world):
        if rank > start:
            runs.append((start, rank - 1))
        start = rank + 1
    if start < world:
        runs.append((start, world - 1))
    return _runs_text(runs)


def _runs_text(runs: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in runs[:RUNS_SHOWN])
    more = sum(last - first + 1 for first, last in runs[RUNS_SHOWN:])
    return shown + (f" and {more} more" if more else "")
