"""THE record file reader (results.sink.JsonlReader), both ways gpuval reads with it: as the exporter does (from
where the last read stopped, a line not yet ended left for later) and whole, as `iter_results` does for `gpuval
import` (a bad line reported with its number). Hostile and damaged files: torn lines, a torn write with the next
record glued to it, bytes that are no UTF-8, a monster line, rotation by rename, truncation, copytruncate, a
symlink, a FIFO, /dev/zero."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from gpuval.errors import UsageError
from gpuval.results import Result, Status, save_results
from gpuval.results import sink
from gpuval.results.sink import JsonlReader, iter_results, run_records
from tests.helpers.records import record

Read = Callable[[Path], tuple[list[Result], int]]


def _as_the_exporter(path: Path) -> tuple[list[Result], int]:
    reader = JsonlReader(path)
    return list(reader.read()), reader.skipped


def _as_an_import(path: Path) -> tuple[list[Result], int]:
    bad: list[int] = []
    return list(iter_results(path, lambda lineno, _why: bad.append(lineno))), len(bad)


@pytest.fixture(params=[_as_the_exporter, _as_an_import], ids=["exporter", "iter_results"])
def read(request: pytest.FixtureRequest) -> Read:
    return request.param


def _line(run: str, status: Status = Status.PASS) -> str:
    return record(status, run=run).model_dump_json() + "\n"


def test_a_torn_line_is_skipped_and_counted_and_the_next_record_read(read: Read, tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text(_line("r1") + '{"schema_version": 1, "id": "torn", "run_\n' + _line("r2", Status.FAIL))
    got, skipped = read(path)
    assert [r.run_id for r in got] == ["r1", "r2"] and skipped == 1


def test_a_torn_write_glued_to_the_next_record_keeps_that_record(read: Read, tmp_path: Path):
    """A crash mid-write leaves no newline: the next run's first record is appended to the torn text."""
    path = tmp_path / "r.jsonl"
    path.write_text('{"schema_version": 1, "id": "torn", "run_')
    save_results([record(Status.FAIL, run="r2", value=3)], path, db="none")
    got, skipped = read(path)
    assert [r.run_id for r in got] == ["r2"] and skipped == 1  # the torn record, counted


def test_bytes_that_are_no_utf8_inside_a_string_keep_the_record(read: Read, tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_line("r1").replace('"reason":""', '"reason":"bad \xff byte"').encode("latin-1"))
    got, skipped = read(path)
    assert [(r.run_id, r.reason) for r in got] == [("r1", "bad \ufffd byte")] and skipped == 0


def test_a_monster_line_is_skipped_without_being_held(read: Read, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sink, "MAX_LINE", 4096)
    path = tmp_path / "r.jsonl"
    path.write_text("x" * 50_000 + "\n" + _line("r1"))
    got, skipped = read(path)
    assert [r.run_id for r in got] == ["r1"] and skipped == 1


def test_iter_results_names_a_bad_line_by_its_number(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text(_line("r1") + "\n" + "not json\n")
    with pytest.raises(UsageError, match=r"r\.jsonl:3: not a gpuval Result record"):
        list(iter_results(path))


def test_a_last_line_without_its_newline_waits_for_the_next_read_unless_the_read_is_final(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    whole = _line("r1")
    path.write_text(whole[:-10])  # a record still being written
    reader = JsonlReader(path)
    assert list(reader.read()) == [] and reader.offset == 0 and reader.skipped == 0
    path.write_text(whole)
    assert [r.run_id for r in reader.read()] == ["r1"]
    path.write_text(whole.rstrip("\n"))  # a file whose last record has no newline, read whole
    assert [r.run_id for r in iter_results(path)] == ["r1"]


def test_the_file_is_read_on_from_the_last_offset_and_again_when_rotated(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    save_results([record(run="r1")], path, db="none")
    reader = JsonlReader(path)
    assert [r.run_id for r in reader.read()] == ["r1"] and reader.offset == path.stat().st_size
    save_results([record(Status.FAIL, run="r2")], path, db="none")
    assert [r.run_id for r in reader.read()] == ["r2"] and reader.skipped == 0
    path.write_text(_line("r3"))  # truncated and rewritten shorter
    assert [r.run_id for r in reader.read()] == ["r3"]
    path.rename(tmp_path / "r.jsonl.1")  # rotated by rename: a new file at the name
    path.write_text(_line("r4") + _line("r5") + _line("r6"))
    assert [r.run_id for r in reader.read()] == ["r4", "r5", "r6"]


def test_copytruncate_then_more_bytes_than_were_read_loses_no_record(tmp_path: Path):
    """logrotate's copytruncate keeps the file (same inode) and truncates it; when more is written before the next
    read than had been read before, the size alone does not show it. The first record written after the rotation,
    a FAIL, was never read (reliability review D12 b)."""
    path = tmp_path / "r.jsonl"
    path.write_text(_line("before"))
    reader = JsonlReader(path)
    assert [r.run_id for r in reader.read()] == ["before"]
    inode = path.stat().st_ino
    with path.open("r+") as fh:  # copytruncate: the same file, emptied
        fh.truncate(0)
    with path.open("a") as fh:
        fh.write(_line("bad", Status.FAIL) + _line("after") + _line("after-2"))
    assert path.stat().st_ino == inode and path.stat().st_size > reader.offset
    assert [r.run_id for r in reader.read()] == ["bad", "after", "after-2"]


def test_a_run_is_read_from_where_it_began(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    save_results([record(run="earlier")], path, db="none")
    start = sink.end_of(path)
    save_results([record(run="mine"), record(run="another"), record(run="mine", name="gpu_count")], path, db="none")
    assert [r.name for r in run_records(path, "mine", start)] == ["ecc", "gpu_count"]
    assert run_records(tmp_path / "none.jsonl", "mine") == []


@pytest.mark.timeout(30)
def test_a_symlink_a_fifo_and_a_device_are_refused_at_once(read: Read, tmp_path: Path):
    """Reading a FIFO would wait for a writer for ever, /dev/zero never ends; a symlink is not followed."""
    target = tmp_path / "real.jsonl"
    target.write_text(_line("r1"))
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        read(link)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="symbolic link"):
        read(zero)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        read(Path("/dev/zero"))


def test_a_missing_file_holds_no_record_for_the_exporter_and_is_an_error_for_an_import(tmp_path: Path):
    assert list(JsonlReader(tmp_path / "none.jsonl").read()) == []
    with pytest.raises(UsageError, match="cannot read"):
        list(iter_results(tmp_path / "none.jsonl"))


def test_records_to_dev_stdout_on_a_file_stay_in_order_with_what_stdout_prints(tmp_path: Path):
    """`--results /dev/stdout` with stdout on a file (a local job's output.log, `> out`): the records land between
    the lines printed before and after them, none overwritten by the table printed next (a second open of the file
    keeps an offset of its own; the failure of `submit train --on local` that this fixes)."""
    out = tmp_path / "out"
    script = ("import sys\nfrom pathlib import Path\nfrom gpuval.results.sink import append_jsonl\n"
              "from tests.helpers.records import record\nprint('before')\n"
              "append_jsonl([record(run='a'), record(run='b')], Path('/dev/stdout'))\nprint('after')\n")
    with out.open("w") as fh:
        subprocess.run([sys.executable, "-c", script], stdout=fh, check=True, timeout=60,
                       cwd=Path(__file__).parents[2])
    lines = out.read_text().splitlines()
    assert [lines[0], lines[-1], len(lines)] == ["before", "after", 4]
    assert [Result.model_validate_json(line).run_id for line in lines[1:3]] == ["a", "b"]
