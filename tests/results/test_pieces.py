"""Records cut into pieces for a launcher that forwards output in 1 KiB messages, and joined back: the writer
(results/sink.append_jsonl on a pipe), the reader of a job's output (workloads/base.printed_results) and the fleet's
per-node joining. The real two-node Slurm job that tore records before is tests/engines/test_slurm.py's
test_long_records_of_two_nodes_come_back_whole."""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timezone
from pathlib import Path

from gpuval.engines.spec import JobSpec
from gpuval.results import Result
from gpuval.results.pieces import MARK, PIECE_BYTES, PieceJoiner, record_lines
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
