"""NCCL RAS: the reader of its text and JSON status on the outputs NVIDIA documents (and whole answers in its
source's formats: tests/data/nccl-ras/SOURCE.md), and the client against a stand-in listener on 127.0.0.1 that
speaks RAS's protocol (no NCCL job runs here): JSON where NCCL has it, text from an older NCCL, and the ways it
cannot be had (nothing listening, too slow, not RAS, garbage)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuval.collectives.nccl_ras import RasUnavailable, read_json_status, read_text_status
from gpuval.collectives.nccl_ras_client import query_ras, ras_address
from gpuval.node.dist_env import free_port
from tests.helpers.ras_standin import RasStandIn, Replay

DATA = Path(__file__).resolve().parent.parent / "data" / "nccl-ras"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def test_a_job_progressing_normally():
    status = read_text_status(_text("docs-normal.txt"))
    (comm,) = status.communicators
    assert (comm.group, comm.count, comm.nodes, comm.size, comm.status, comm.errors) == (0, 8, 4, 4, "RUNNING", "OK")
    assert status.findings == [] and status.format == "text"


def test_a_mismatch_names_the_ranks_behind_with_ras_words():
    status = read_text_status(_text("docs-mismatch.txt"))
    (finding,) = status.findings
    assert (finding.kind, finding.severity, finding.communicator) == ("MISMATCH", "warning",
                                                                      "#0-0 (27a079b828ff1a75)")
    assert finding.summary == "Communicator ranks have different collective operation counts"
    assert [r.rank for r in finding.ranks] == [0, 2, 3, 4, 5, 7]
    assert {r.note for r in finding.ranks} == {"have launched up to operation 6649"}
    assert (finding.ranks[1].pid, finding.ranks[1].host, finding.ranks[1].gpu) == (483074, "172.16.64.210", 2)


def test_communicators_being_replaced_are_three_rows():
    status = read_text_status(_text("docs-finalize.txt"))
    assert [(c.group, c.count, c.status, c.errors) for c in status.communicators] == [
        (0, 1, "FINALIZE", "MISMATCH"), (1, 7, "RUNNING", "OK"), (2, 1, "INIT", "OK")]
    assert status.findings == []  # the docs' excerpt elides the Warnings header: no section, no finding


def test_a_stopped_process_is_incomplete_and_later_dead():
    status = read_text_status(_text("docs-incomplete.txt"))
    assert [(f.kind, f.severity) for f in status.findings] == [("INCOMPLETE", "error"), ("INCOMPLETE", "error"),
                                                               ("TIMEOUT", "warning")]
    job, comm, _ = status.findings
    assert [(p.pid, p.host, p.gpus) for p in job.processes] == [(3487984, "172.16.64.213", "5")]
    assert comm.communicator == "#0-0 (cf264af53edbe986)" and [r.rank for r in comm.ranks] == [21]
    assert status.timeouts == 2
    dead = read_text_status(_text("docs-dead.txt"))
    assert dead.findings[0].kind == "DEAD" and dead.findings[0].processes[0].pid == 3487984
    assert dead.findings[0].summary == "1 job process is considered dead (unreachable via the RAS network)"


def test_a_whole_answer_in_the_current_wording():
    status = read_text_status(_text("source-dead-2.29.txt"))
    assert status.nccl_version == "2.29.1+cuda13.0"
    kinds = [(f.kind, f.communicator) for f in status.findings]
    assert kinds == [("INCOMPLETE", ""), ("DEAD", ""), ("INCOMPLETE", "#0-0 (cf264af53edbe986)"), ("TIMEOUT", ""),
                     ("MISMATCH", "#0-0 (cf264af53edbe986)")]
    missing = status.findings[2].ranks[0]
    assert (missing.rank, missing.pid, missing.gpu, missing.host) == (3, 3487984, 1, "172.16.64.213")
    behind = status.findings[4].ranks[0]
    assert (behind.rank, behind.note) == (2, "has launched up to operation 1041")


def test_the_json_status():
    status = read_json_status(_text("docs-status.json"))
    assert (status.format, status.nccl_version, status.timestamp) == ("json", "2.29.1", "2025-12-19 13:06:53")
    (comm,) = status.communicators
    assert comm.hash == "0xae94423cfbb2ef4a" and comm.size == 2
    assert comm.ranks[0].counts["AllReduce"] == 0 and comm.ranks[0].abort_flag is False
    assert (comm.missing[0].rank, comm.missing[0].unresponsive, comm.missing[0].considered_dead) == (1, True, False)
    dead = read_json_status(_text("source-dead.json"))
    assert dead.communicators[0].missing[0].considered_dead and dead.communicators[0].ranks[2].async_error == 6
    assert dead.timeouts == 1 and dead.collection_s == pytest.approx(5.012)


@pytest.mark.parametrize("reader,text", [
    (read_text_status, "HTTP/1.1 400 Bad Request\r\n\r\n"), (read_text_status, ""),
    (read_json_status, "{not json"), (read_json_status, "[1, 2]"), (read_json_status, '{"communicators": 5}'),
])
def test_what_is_no_status_is_said(reader, text):
    with pytest.raises(RasUnavailable):
        reader(text)


def test_odd_json_values_are_passed_over():
    status = read_json_status('{"communicators": [7, {"ranks": [{"rank": "x", "status": 3}]}], '
                              '"ras": {"collection_time_sec": NaN}}')
    assert status.communicators[0].ranks[0].rank is None and status.collection_s is None


def test_json_from_an_nccl_that_has_it():
    replay = Replay(text=_text("docs-normal.txt"), json=_text("docs-status.json"))
    with RasStandIn(replay) as port:
        status = query_ras("127.0.0.1", port, timeout_s=10)
    assert status.format == "json" and status.address == f"127.0.0.1:{port}"
    assert replay.commands == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]


def test_text_from_an_older_nccl_and_json_refused_where_asked_for():
    replay = Replay(text=_text("docs-incomplete.txt"))
    with RasStandIn(replay) as port:
        status = query_ras("127.0.0.1", port, verbose=True, ras_timeout_s=3, timeout_s=10)
        assert status.format == "text" and status.findings[0].kind == "INCOMPLETE"
        assert replay.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 3", "SET FORMAT json", "VERBOSE STATUS"]
        with pytest.raises(RasUnavailable, match="2.28.7"):
            query_ras("127.0.0.1", port, fmt="json", timeout_s=10)
        assert query_ras("127.0.0.1", port, fmt="text", timeout_s=10).format == "text"


def test_nothing_listening_is_said():
    port = free_port()
    with pytest.raises(RasUnavailable, match=f"no NCCL RAS service at 127.0.0.1:{port}"):
        query_ras("127.0.0.1", port, timeout_s=5)


@pytest.mark.parametrize("replay", [Replay(text="x", status_delay_s=6), Replay(text="x", hello_delay_s=6)])
def test_a_slow_or_silent_service_times_out(replay):
    with RasStandIn(replay) as port:
        start = time.monotonic()
        with pytest.raises(RasUnavailable, match="did not answer within 1 s"):
            query_ras("127.0.0.1", port, timeout_s=1)
        assert time.monotonic() - start < 4


@pytest.mark.parametrize("replay,match", [
    (Replay(text="x", hello="HTTP/1.1 400 Bad Request"), "is not NCCL RAS"),
    (Replay(text="\x00\x01garbage\n"), "not a status"),
    (Replay(text="", json="{ truncated"), "does not parse"),
])
def test_what_is_not_ras_is_said(replay, match):
    with RasStandIn(replay) as port, pytest.raises(RasUnavailable, match=match):
        query_ras("127.0.0.1", port, timeout_s=5)


@pytest.mark.parametrize("value,expected", [
    (None, ("localhost", 28028)), ("", ("localhost", 28028)), ("10.0.0.5:29000", ("10.0.0.5", 29000)),
    ("node7", ("node7", 28028)), ("[::1]:28100", ("::1", 28100)), (":28100", ("localhost", 28100)),
])
def test_the_ras_address(value, expected):
    assert ras_address(value) == expected


def test_a_bad_ras_address_is_said():
    with pytest.raises(RasUnavailable, match="port"):
        ras_address("host:abc")
