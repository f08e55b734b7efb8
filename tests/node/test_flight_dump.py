"""A Flight Recorder dump read as hostile input (gpuval.node.flight_dump): real dumps of a real gloo hang and the
tutorial's published sample are read and typed; a pickle that names a global (os.system, by every protocol's
opcode) is refused and never run; truncated, oversized, too deep or too wide, and wrongly typed documents are one
line each, never a traceback. Data: tests/data/flight-recorder/README.md."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from gpuval.node import flight_dump
from gpuval.node.flight_dump import MAX_DUMP_BYTES, UnreadableDump, parse_dump
from gpuval.node.flight_recorder import read_dump

DATA = Path(__file__).resolve().parent.parent / "data" / "flight-recorder"
STOP = DATA / "gloo-4rank-stop"


def test_a_real_gloo_dump_is_typed_with_its_frames():
    dump = parse_dump((STOP / "rank_0").read_bytes())
    assert dump.version == "2.10" and dump.pg_status["1"].last_enqueued_collective == 4
    assert dump.pg_status["1"].last_completed_collective == 3  # rank 0 waits in tp #4
    last = dump.entries[-1]
    assert (last.profiling_name, last.op, last.process_group, last.collective_seq_id) == \
        ("gloo:all_reduce", "all_reduce", ("1", "tp"), 4)
    assert last.input_sizes == [[64, 4]] and last.input_dtypes == ["Float"] and not last.completed
    assert last.frames[0].name == "all_reduce" and "tensor_parallel_reduce (flight_hang.py:33)" in \
        [f.where() for f in last.frames]


def test_torchs_json_form_of_the_same_moment_reads_alike():
    """_dump_fr_trace_json: no frames, pg_status numbers as text, gloo's discovery times as 0."""
    json_dump, pickled = parse_dump((STOP / "rank_0.json").read_bytes()), parse_dump((STOP / "rank_0").read_bytes())
    assert json_dump.pg_status == pickled.pg_status
    assert [(e.process_group, e.collective_seq_id, e.completed) for e in json_dump.entries] == \
        [(e.process_group, e.collective_seq_id, e.completed) for e in pickled.entries]
    assert all(not e.frames for e in json_dump.entries)


def test_the_tutorials_sample_reads_as_json_and_as_torchs_pickle():
    text = (DATA / "tutorial-2.5.json").read_bytes()
    dump = parse_dump(text)
    assert dump.version == "2.5" and dump.pg_config["0"].ranks == [0, 1] and dump.entries[0].completed
    import json
    assert parse_dump(pickle.dumps(json.loads(text), protocol=2)) == dump


class Payload:
    """What a hostile dump carries: unpickling it with the standard unpickler runs os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_pickle_naming_os_system_is_refused_and_never_run(tmp_path, protocol):
    marker = tmp_path / "ran"
    data = pickle.dumps({"version": "2.10", "entries": [Payload(marker)]}, protocol=protocol)
    if protocol == 0:
        data = b"\x80\x02" + data  # a dump starts with a protocol byte; protocol 0 has none, its GLOBAL opcode stays
    with pytest.raises(UnreadableDump, match=r"names a global \((posix|os)\.system\).*nothing was run"):
        parse_dump(data)
    assert not marker.exists()


def test_truncated_and_foreign_bytes_are_one_line():
    whole = (STOP / "rank_1").read_bytes()
    for data, said in ((whole[: len(whole) // 2], "truncated"), (b"", "neither a pickle nor JSON"),
                       (b"ELF\x7f", "neither"), (b'{"version": ', "not valid JSON"),
                       (pickle.dumps([1, 2], protocol=2), "not a Flight Recorder dump"),
                       (b"\x80\x02K\x01.", "not a Flight Recorder dump")):
        with pytest.raises(UnreadableDump, match=said):
            parse_dump(data)


@pytest.mark.parametrize("doc, said", [
    ({"version": "2.10", "entries": "os.system('x')"}, r"entries: Input should be a valid list"),
    ({"version": "2.10", "pg_config": {"0": {"name": "0", "ranks": "__import__('os')"}}}, "not a list of numbers"),
    ({"version": "2.10", "entries": [{"record_id": "one"}]}, "entries.0.record_id"),
    ({"version": "2.10", "entries": [], "extra": {1, 2}}, "holds a set, not plain data"),
    ({"version": "2.10", "entries": [], "extra": bytearray(b"x")}, "holds a bytearray"),
])
def test_values_of_the_wrong_type_are_refused(doc, said):
    with pytest.raises(UnreadableDump, match=said):
        parse_dump(pickle.dumps(doc, protocol=5))  # 5: sets and bytearrays by their own opcodes, no global


def test_depth_and_shared_references_are_bounded(monkeypatch):
    deep: list = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(UnreadableDump, match="nests deeper than 12"):
        parse_dump(pickle.dumps({"version": "2.10", "entries": deep}, protocol=2))
    # a few hundred bytes that unfold into 10**8 values through shared references: counted as a tree
    monkeypatch.setattr(flight_dump, "MAX_NODES", 100_000)
    bomb: list = [0] * 10
    for _ in range(7):
        bomb = [bomb] * 10
    data = pickle.dumps({"version": "2.10", "entries": bomb}, protocol=2)
    assert len(data) < 500
    with pytest.raises(UnreadableDump, match="more than 100,000 values"):
        parse_dump(data)


def test_a_1gb_dump_is_refused_unread(tmp_path):
    """A sparse 1 GiB file: refused by its size before a byte is read (parse_dump says the same of bytes)."""
    big = tmp_path / "fr-0"
    with big.open("wb") as handle:
        handle.truncate(2**30)
    with pytest.raises(UnreadableDump, match=r"1,073,741,824 bytes, over the limit of 32 MiB: not read"):
        read_dump(big, os.getuid())
    assert MAX_DUMP_BYTES == 32 * 2**20


def test_a_dump_that_is_no_regular_file_of_the_ranks_user_in_their_own_folder_is_not_read(tmp_path):
    real = tmp_path / "real"
    real.write_bytes((STOP / "rank_0").read_bytes())
    (tmp_path / "link").symlink_to(real)
    os.mkfifo(tmp_path / "fifo")
    for name, said in (("link", "symbolic link"), ("fifo", "not a regular file")):
        with pytest.raises(UnreadableDump, match=said):
            read_dump(tmp_path / name, os.getuid())
    with pytest.raises(UnreadableDump, match=f"not a folder of uid 65534's own: owned by uid {os.getuid()}"):
        read_dump(real, 65534)  # the folder is not the rank's user's: nothing in it is read as theirs
    assert read_dump(real, os.getuid())[0].entries
    if os.geteuid() == 0:  # another account's file in the user's own folder
        os.chown(real, 65534, 65534)
        with pytest.raises(UnreadableDump, match="owned by uid 65534, not 0: not read"):
            read_dump(real, 0)
