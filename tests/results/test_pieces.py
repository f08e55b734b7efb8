"""Records cut into pieces for a launcher that forwards output in 1 KiB messages, and joined back: the writer
(results/sink.append_jsonl on a pipe), the reader of a job's output (workloads/base.printed_results) and the fleet's
per-node joining. The real two-node Slurm job that tore records before is tests/engines/test_slurm.py's
test_long_records_of_two_nodes_come_back_whole."""

from __future__ import annotations

import json
import os
import random
import sys
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuval.engines.slurm.labels import labelled
from gpuval.engines.spec import JobSpec
from gpuval.fleet.run.lines import RoundReader
from gpuval.fleet.plan.terms import Round, Test
from gpuval.results import Result
from gpuval.results.pieces import MARK, MAX_OPEN_BYTES, MAX_PIECES, PIECE_BYTES, PieceJoiner, record_lines
from gpuval.results.sink import append_jsonl
from gpuval.workloads.base import ResultContext, printed_results
from tests.helpers.records import record


def _record(host: str, size: int) -> Result:
    """A record whose reason is `size` characters long, starting with two-byte ones: a cut must never fall inside
    one."""
    return record(host=host, name="hbm_bandwidth", reason="é" * 3 + "x" * size)


def _context() -> ResultContext:
    return ResultContext(spec=JobSpec(name="h", command=["gpuval", "health"], nodes=2), engine="slurm", job_id="7",
                         run_id="r", started=datetime.now(timezone.utc))


def test_a_short_line_is_written_as_it_is():
    line = _record("n1", 10).model_dump_json() + "\n"
    assert record_lines(line, "k") == [line]


def test_a_long_line_is_cut_under_the_message_size_between_characters_and_joined_back():
    line = json.dumps({"a": "é" * 2000 + "ü" * 1001}, ensure_ascii=False) + "\n"
    pieces = record_lines(line, "key1")
    assert len(pieces) > 3 and all(p.startswith(MARK) and len(p.encode()) <= PIECE_BYTES for p in pieces)
    joiner = PieceJoiner()
    got = [joiner.add(p) for p in reversed(pieces)]  # any order
    assert got[:-1] == [None] * (len(pieces) - 1) and got[-1] == line


def test_pieces_of_two_sources_are_never_joined_together():
    """A node cannot finish or overwrite another node's record by printing pieces with its key."""
    pieces = record_lines(json.dumps({"a": "x" * 3000}) + "\n", "same")
    joiner = PieceJoiner()
    assert [joiner.add(p, "n1") for p in pieces[:-1]] == [None] * (len(pieces) - 1)
    assert joiner.add(pieces[-1], "n2") is None
    assert joiner.add(pieces[-1], "n1") is not None


def test_malformed_piece_lines_are_logs_not_records():
    joiner = PieceJoiner()
    for text in (f"{MARK}k x/2 t", f"{MARK}k 3/2 t", f"{MARK}k", f"{MARK}k 0/99999999 t", f"{MARK}k -1/2 t"):
        assert joiner.add(text) is None


def test_a_pipe_gets_pieces_a_file_whole_lines(tmp_path):
    records = [_record("n1", 3000), _record("n1", 5)]
    read, write = os.pipe()
    append_jsonl(records, Path(f"/proc/self/fd/{write}"))  # what /dev/stdout is in a job's task
    os.close(write)
    with os.fdopen(read) as fh:
        piped = fh.read().splitlines(keepends=True)
    assert sum(line.startswith(MARK) for line in piped) > 3 and not piped[-1].startswith(MARK)
    file = append_jsonl(records, tmp_path / "r.jsonl")
    assert [json.loads(line)["id"] for line in file.read_text().splitlines()] == [r.id for r in records]


def test_records_of_two_nodes_torn_apart_and_mixed_come_back_whole():
    """What a shared job output holds when two nodes write long records at once: their pieces interleaved (and
    labelled as srun -l does), log lines between them. Every record is read back once."""
    records = [_record(f"n{i % 2 + 1}", 1000 + 37 * i) for i in range(40)]
    streams = [[f"{i % 2}: {p}" for p in record_lines(r.model_dump_json() + "\n", r.id)] for i, r in enumerate(records)]
    rng = random.Random(7)
    mixed: list[str] = ["srun: cluster configuration lacks support for cpu binding\n"]
    while any(streams):
        stream = rng.choice([s for s in streams if s])
        mixed.append(stream.pop(0))
    got = printed_results(mixed, _context(), kind="health")
    assert sorted(r.id for r in got) == sorted(r.id for r in records)
    assert {r.where.hostname for r in got} == {"n1", "n2"}


# ---- bounded and linear: what a broken or hostile node's pieces cost the reader -----------------------------------


def _opcodes(work) -> int:
    """Python bytecode instructions executed inside results/pieces.py while `work()` runs: a deterministic measure
    of the joiner's cost (the wall clock of this shared machine is not one)."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename.endswith(os.path.join("results", "pieces.py")):
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(tracer)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def test_each_piece_costs_the_same_however_many_came_before():
    """One record's pieces in order: the joiner's work grows with their number, not with its square (it scanned
    every slot of the record on every piece: 65,536 pieces took 146 s)."""
    def feed(n: int) -> None:  # n of a record's n + 1 pieces
        joiner = PieceJoiner()
        for i in range(n):
            assert joiner.add(f"{MARK}k {i}/{n + 1} x\n", "b") is None

    small, large = _opcodes(lambda: feed(MAX_PIECES // 4)), _opcodes(lambda: feed(MAX_PIECES - 1))
    assert large < 4.4 * small, (small, large)  # four times the pieces, four times the work (quadratic: sixteen)


def test_many_pieces_of_a_broken_node_cost_little_memory():
    """The red team's input: 4,096 lines from one node, each the first piece of a new record that claims 65,536
    pieces (123 kB of output). It held 2 GB ([None] * 65,536 per record); now a count past MAX_PIECES is no piece,
    and what a node keeps of records it began is bounded."""
    def lines(count: int):
        return (f"1: {MARK}k{i} 0/{count} x\n" for i in range(4096))

    for count in (1 << 16, MAX_PIECES):
        reader = RoundReader(Round(0, (Test("r0-suite-a", "node", ("a",), 8, "suite"),
                                       Test("r0-suite-b", "node", ("b",), 8, "suite"))))
        tracemalloc.start()
        try:
            reader.feed(labelled(lines(count), ["a", "b"]))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 50_000_000, (count, peak)


def _flood_peak(joiner: PieceJoiner, filler: str) -> int:
    """Node b begins 20,000 records of one piece `filler` each and finishes none: the most memory it took."""
    tracemalloc.start()
    try:
        for i in range(20_000):
            assert joiner.add(f"{MARK}k{i} 0/2 {filler}\n", "b") is None
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flooding_node_drops_its_own_records_never_another_nodes():
    """Node b begins 20,000 records of full-size pieces (20 MB) and finishes none; node a's record, begun before
    the flood, still completes, and the joiner never holds much more than MAX_OPEN_BYTES for b."""
    mine = record_lines(json.dumps({"a": "x" * 3000}) + "\n", "mine")
    filler = "y" * (PIECE_BYTES - 60)
    joiner = PieceJoiner()
    assert [joiner.add(p, "a") for p in mine[:-1]] == [None] * (len(mine) - 1)
    assert _flood_peak(joiner, filler) < 2 * MAX_OPEN_BYTES
    assert joiner.add(mine[-1], "a") == json.dumps({"a": "x" * 3000}) + "\n"
    assert joiner.add(f"{MARK}k19999 1/2 z\n", "b") == f"{filler}z\n"  # the newest of b's is kept


def test_a_record_no_reader_would_join_is_refused_by_the_writer():
    with pytest.raises(ValueError, match=f"more than {MAX_PIECES}"):
        record_lines(json.dumps({"a": "x" * (PIECE_BYTES * (MAX_PIECES + 1))}) + "\n", "k")
    assert PieceJoiner().add(f"{MARK}k 0/2 {'x' * (PIECE_BYTES + 1)}\n") is None  # no piece gpuval writes


@pytest.mark.parametrize("filler", ["\U0001f600" * (PIECE_BYTES - 60), "\U0001f600" + "y" * (PIECE_BYTES - 64)])
def test_the_bound_counts_bytes_not_characters(filler: str):
    """Pieces of four-byte characters: 900 characters are 3,600 bytes, no piece gpuval writes, and one such
    character makes Python keep every character of a piece in four bytes. Counted in characters, a node held four
    times MAX_OPEN_BYTES; counted in bytes (UTF-8 on the wire, what the string costs in memory) the bound holds."""
    joiner = PieceJoiner()
    assert _flood_peak(joiner, filler) < 2 * MAX_OPEN_BYTES
    fits = len(filler.encode()) <= PIECE_BYTES
    assert (joiner.add(f"{MARK}k19999 1/2 z\n", "b") == f"{filler}z\n") is fits  # a piece that fits is still joined
