"""What a diagnosis keeps of a job's output (reliability-4 D10, red team 5 N4): read once and streaming, each line cut
before anything reads it, each rank's first and last step records, each node's first NCCL lines; every bound counted
per node of the job and in all, never on the ranks or pids the output names, and what is left out said. The engine
here is a stand-in that hands out (node, line) pairs from a generator, as `Engine.node_lines` does; what is claimed
is job_lines' own bound, not an engine's (the engines' reading of a file is bounded in tests/engines/test_output.py).
Memory is measured with tracemalloc: what job_lines holds at its peak, not the time it takes."""

from __future__ import annotations

import json
import sys
import tracemalloc
from typing import Callable, Iterator

import pytest

from gpuval.cli.render import diagnosis_lines
from gpuval.diagnosis.job_diagnosis import JobDiagnosis
from gpuval.diagnosis.job_records import read_job_records
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.engines.probe import Placement, ProbeOutput
from gpuval.results.model import Status
from gpuval.workloads.diagnose.output import (
    ENTRY_BYTES, LINE_CHARS, NCCL_NODE_BYTES, NCCL_NODE_LINES, NODE_RANKS, RECORDS_FIRST, RECORDS_LAST, JobOutput,
)
from gpuval.workloads.diagnose.act import act_exit
from gpuval.workloads.diagnose.probe import NodeProbe
from gpuval.workloads.diagnose.records import job_records
from gpuval.workloads.diagnose.run import DiagnoseRequest, job_lines, judge
from tests.diagnosis.test_straggler import _window


class _Output:
    """A job's output as an engine hands it over: (node, line) pairs, made as they are read."""

    name = "stand-in"

    def __init__(self, pairs: Iterator[tuple[str | None, str]]) -> None:
        self.pairs = pairs

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        return self.pairs


def _peak(read: Callable[[], JobOutput]) -> tuple[JobOutput, int]:
    """What `read` returns and the most memory it held (tracemalloc's peak) while it ran."""
    tracemalloc.start()
    try:
        found = read()
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _nccl(count: int) -> Iterator[tuple[str | None, str]]:
    """NCCL_DEBUG=INFO as a large job writes it: two labelled nodes, and unlabelled lines of two processes."""
    for i in range(count):
        node = f"n{i % 2 + 1}"
        yield node, f"{node}:4242:4300 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC"
        yield None, f"n3:{5000 + i % 2}:5100 [1] NCCL INFO Channel {i % 32:02d}/1 : 1[1] -> 0[0] via P2P/IPC"


def test_d10_a_flood_of_nccl_lines_and_a_giant_line_keep_little():
    """reliability-4: 243 MB of NCCL INFO lines held 680 MB; one 400 MB line without a newline 827 MB. Here 18,000
    NCCL lines (made as they are read, 3 MB) and a 50 MB line: what is kept is each place's first NCCL_NODE_LINES
    lines (two labelled nodes; the process a probe found on n3; the other unlabelled process, whose pid no probe
    found, with the lines no node places) and the giant line's first LINE_CHARS characters, a few MB at the most."""
    giant = "NCCL INFO " + "x" * (50 << 20)  # made before the count starts: what job_lines adds is measured

    def pairs():
        yield from _nccl(9_000)
        yield ("n4", giant)

    kept, peak = _peak(lambda: job_lines(_Output(pairs()), "J", pids_at={5000: "n3"}))
    assert len(kept.lines) == 4 * NCCL_NODE_LINES + 1 and kept.lines[-1] == ("n4", giant[:LINE_CHARS])
    assert peak < 8 << 20, peak
    assert {node for node, _ in kept.lines} == {"n1", "n2", "n4", None}
    assert kept.notes == [f"{18_000 - 4 * NCCL_NODE_LINES:,} NCCL lines past a node's first 4,096 or 1 MiB (or the "
                          "job's 64 MiB) not read (on n1, n2, n3; lines no node places)"]


def _record(rank: int, window: int, pad: str = "") -> str:
    """A step record of a 1-node job's rank as the red team wrote them (tmp/rt5/d10/gen.py): 5 steps a window,
    rank 0 slow, each line padded to about 4 KiB before its mark."""
    slow = rank == 0
    doc = {"v": 1, "rank": rank, "local_rank": 0, "world": 32768, "host": "vm", "pid": 10000 + rank, "gpu": None,
           "bus": None, "job": "", "steps": [window * 5, window * 5 + 4], "n": 5,
           "t": [1000.0 + window * 0.3, 1000.3 + window * 0.3], "step_s": {"sum": 0.3, "med": 0.06, "max": 0.061},
           "compute_s": {"sum": 0.3 if slow else 0.1, "med": 0.06 if slow else 0.02, "max": 0.06 if slow else 0.02},
           "wait_s": {"sum": 0.0 if slow else 0.2, "med": 0.0 if slow else 0.04, "max": 0.0 if slow else 0.04},
           "coll": 5, "seq": 5 * (window + 1)}
    return pad + "gpuval-step " + json.dumps(doc, separators=(",", ":"))


def test_n4_one_nodes_output_cannot_multiply_what_is_kept():
    """Red team 5 N4: one node's output reached every bound, which were counted on what the output names (32,768
    ranks x 22 records of 4 KiB; 4,096 NCCL lines per pid its prefix names, 400,000 in all): 6 GB held. The same
    shape scaled down, with the same multiplication: NODE_RANKS + 32 ranks x 22 records padded to 3.9 KiB, then 4,000
    NCCL lines of 4 KiB each from its own pid, none of them placed by the engine or a probe (the lines no node places
    are one place). Before, job_lines held all of it (30 MB here, 40 MB with twice the ranks); now one place's bounds
    (2.7 MB here, the same with twice the ranks and lines): NODE_RANKS ranks' records as the timer writes them and
    NCCL_NODE_BYTES of NCCL lines, whatever the output names, and the rest is said."""
    pad = "z" * 3400 + " "  # the output made before the count starts: what job_lines holds of it is measured
    output = [_record(rank, window, pad) for window in range(22) for rank in range(NODE_RANKS + 32)]
    output += [f"vm:{100000 + i}:1 [0] NCCL INFO {'x' * 4000}" for i in range(4_000)]
    kept, peak = _peak(lambda: job_lines(_Output((None, line) for line in output), "J"))
    assert peak < 6 << 20, peak
    records = read_job_records(kept.lines).records
    assert len({r.rank for r in records}) == NODE_RANKS and len(records) == NODE_RANKS * 22
    assert max(len(line) for _, line in kept.lines if "gpuval-step" in line) < 1000  # no padding kept
    nccl = [line for _, line in kept.lines if "NCCL" in line]
    assert len(nccl) == NCCL_NODE_BYTES // (sys.getsizeof(nccl[0]) + ENTRY_BYTES)
    assert kept.notes == [
        f"{32 * 22:,} records of ranks past a node's first 128 (or the job's 32,768) not read (lines no node "
        "places)",
        f"{4_000 - len(nccl):,} NCCL lines past a node's first 4,096 or 1 MiB (or the job's 64 MiB) not read (lines no "
        "node places)"]


def test_a_large_job_keeps_every_rank_and_its_straggler_is_found():
    """A real large job is not cut: 1,024 ranks on 128 nodes of 8 (rank 5 slow), three windows each: every rank is
    kept, nothing is said left out, and the straggler is the one every record names; the ranks of unlabelled
    lines are placed by where the probes found them, each node's own."""
    records = [r for w in range(3) for r in _window(1024, w, {r: 0.15 if r == 5 else 0.10 for r in range(1024)})]
    labelled = [(f"n{r.rank // 8}", r.to_line()) for r in records]
    kept = job_lines(_Output(iter(labelled)), "J")
    assert len(kept.lines) == len(labelled) and not kept.notes
    unlabelled = job_lines(_Output((None, line) for _, line in labelled), "J",
                           ranks_at={r: f"n{r // 8}" for r in range(1024)})
    assert len(unlabelled.lines) == len(labelled) and not unlabelled.notes
    [slow] = find_stragglers(read_job_records(kept.lines).records).stragglers
    assert slow.rank == 5


def test_d10_each_rank_keeps_its_first_and_last_records_and_the_straggler_is_still_found():
    """A long job (200 windows of 8 ranks, rank 5 slow from window 150): each rank keeps RECORDS_FIRST early and
    RECORDS_LAST late records, in the output's order, and the diagnosis reads the same straggler, with its own early
    history, as from every record."""
    records = [r for w in range(200) for r in _window(8, w, {r: 0.15 if r == 5 and w >= 150 else 0.10
                                                            for r in range(8)})]
    lines = [(f"n{r.rank // 4 + 1}", r.to_line()) for r in records]
    kept = job_lines(_Output(iter(lines)), "J").lines
    assert len(kept) == 8 * (RECORDS_FIRST + RECORDS_LAST)
    assert [line for _, line in kept] == [line for _, line in lines if line in {k for _, k in kept}]  # in order
    full, bounded = (find_stragglers(read_job_records(pairs).records) for pairs in (lines, kept))
    assert [s.rank for s in bounded.stragglers] == [s.rank for s in full.stragglers] == [5]
    assert bounded.stragglers[0].own_history == pytest.approx(full.stragglers[0].own_history) == 1.5


def _judged(slow: int) -> tuple[list[str], JobDiagnosis]:
    """A 1-node job of NODE_RANKS + 8 ranks (unlabelled output, 12 windows, rank `slow` computing 3x longer) read
    as a diagnosis keeps it and judged: (the lines the command prints, the diagnosis)."""
    ranks = NODE_RANKS + 8
    records = [r for w in range(12) for r in _window(ranks, w, {r: 0.3 if r == slow else 0.1 for r in range(ranks)})]
    kept = job_lines(_Output((None, r.to_line()) for r in records), "J")
    req = DiagnoseRequest("J", "run", ras=False, stacks=False, flight=False)
    diag = judge(req, "slurm", Placement(["n1"]), [ProbeOutput("n1")], [("n1", NodeProbe(host="n1", read_at=1.0))],
                 kept)
    return diagnosis_lines(diag), diag


def test_r3_ranks_left_out_make_no_straggler_not_judged_and_a_straggler_kept_is_still_named():
    """Red team 6 R3: past NODE_RANKS ranks a place, the ranks first to print were judged and the rest left out; a
    512-rank job whose rank 300 was slow printed `suspects: none`, `straggler: no straggler` (exit 0). Here rank
    NODE_RANKS + 2 is slow and left out: the straggler and communication rules are "not judged" (a note on the
    subset is no verdict), with how many ranks were left out; the diagnosis keeps its contract for not judged (no
    suspect, exit 0, nothing stored as passed). A slow rank among the kept ones is still named, with a note."""
    lines, diag = _judged(NODE_RANKS + 2)
    assert diag.straggler is not None and diag.comm is not None
    assert diag.straggler.outcome == "not judged" and not diag.straggler.stragglers
    assert diag.straggler.reason.startswith("not judged: the records of 8 rank(s) were left out")
    assert diag.comm.outcome == "not judged" and "the records of 8 rank(s) were left out" in diag.comm.reason
    assert f"  straggler: {diag.straggler.reason}" in lines and lines[0].endswith("suspects: none")
    assert act_exit(diag) == 0 and {r.status for r in job_records(diag)} == {Status.SKIPPED}
    _, found = _judged(5)
    assert found.straggler is not None and found.straggler.outcome == "straggler"
    assert [(s.rank, s.node) for s in found.straggler.stragglers] == [(5, None)]
    assert found.straggler.notes[-1].startswith(f"judged over the {NODE_RANKS} rank(s) kept: the records of 8")
