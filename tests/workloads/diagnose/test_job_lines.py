"""What a diagnosis keeps of a job's output (reliability-4 D10): read once and streaming, each line cut before
anything reads it, each rank's first and last step records, each node's (or NCCL process's) first NCCL lines; the
memory held grows with the job's ranks and nodes, never with how much it printed. The engine here is a stand-in
that hands out (node, line) pairs from a generator, as `Engine.node_lines` does; what is claimed is job_lines' own
bound, not an engine's (the engines' reading of a file is bounded in tests/engines/test_output.py)."""

from __future__ import annotations

import tracemalloc
from typing import Iterator

import pytest

from gpuval.diagnosis.job_records import read_job_records
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.workloads.diagnose.run import LINE_CHARS, NCCL_PER_PLACE, RECORDS_FIRST, RECORDS_LAST, job_lines
from tests.diagnosis.test_straggler import _window


class _Output:
    """A job's output as an engine hands it over: (node, line) pairs, made as they are read."""

    name = "stand-in"

    def __init__(self, pairs: Iterator[tuple[str | None, str]]) -> None:
        self.pairs = pairs

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        return self.pairs


def _nccl(count: int) -> Iterator[tuple[str | None, str]]:
    """NCCL_DEBUG=INFO as a large job writes it: two labelled nodes, and unlabelled lines of two processes."""
    for i in range(count):
        node = f"n{i % 2 + 1}"
        yield node, f"{node}:4242:4300 [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC"
        yield None, f"n3:{5000 + i % 2}:5100 [1] NCCL INFO Channel {i % 32:02d}/1 : 1[1] -> 0[0] via P2P/IPC"


def test_d10_a_flood_of_nccl_lines_and_a_giant_line_keep_little():
    """reliability-4: 243 MB of NCCL INFO lines held 680 MB; one 400 MB line without a newline 827 MB. Here 18,000
    NCCL lines (made as they are read, 3 MB) and a 50 MB line: what is kept is each place's first
    NCCL_PER_PLACE lines (two nodes, two processes of unlabelled output) and the giant line's first LINE_CHARS
    characters, a few MB at the most."""
    giant = "NCCL INFO " + "x" * (50 << 20)  # made before the count starts: what job_lines adds is measured

    def pairs():
        yield from _nccl(9_000)
        yield ("n4", giant)

    tracemalloc.start()
    try:
        kept = job_lines(_Output(pairs()), "J")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(kept) == 4 * NCCL_PER_PLACE + 1 and kept[-1] == ("n4", giant[:LINE_CHARS])
    assert peak < 8 << 20, peak
    assert {node for node, _ in kept} == {"n1", "n2", "n4", None}


def test_d10_each_rank_keeps_its_first_and_last_records_and_the_straggler_is_still_found():
    """A long job (200 windows of 8 ranks, rank 5 slow from window 150): each rank keeps RECORDS_FIRST early and
    RECORDS_LAST late records, in the output's order, and the diagnosis reads the same straggler, with its own early
    history, as from every record."""
    records = [r for w in range(200) for r in _window(8, w, {r: 0.15 if r == 5 and w >= 150 else 0.10
                                                            for r in range(8)})]
    lines = [(f"n{r.rank // 4 + 1}", r.to_line()) for r in records]
    kept = job_lines(_Output(iter(lines)), "J")
    assert len(kept) == 8 * (RECORDS_FIRST + RECORDS_LAST)
    assert [line for _, line in kept] == [line for _, line in lines if line in {k for _, k in kept}]  # in order
    full, bounded = (find_stragglers(read_job_records(pairs).records) for pairs in (lines, kept))
    assert [s.rank for s in bounded.stragglers] == [s.rank for s in full.stragglers] == [5]
    assert bounded.stragglers[0].own_history == pytest.approx(full.stragglers[0].own_history) == 1.5
