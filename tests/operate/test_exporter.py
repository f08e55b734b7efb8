"""`gpuval exporter` against hostile input: torn lines and bad rows are skipped and counted, values
beyond a float are clamped, the server binds 127.0.0.1, holds a bounded number of threads, drops idle connections,
answers HEAD, and reads the JSON Lines file and the store from where it stopped. The exporter runs as a real
`gpuval exporter` subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuval.operate.exporter import JsonlSource
from gpuval.results import save_results
from gpuval.results.model import Metric, Result, Status, Where
from tests.conftest import free_port, run_gpuval

SKIPPED = "gpuval_exporter_skipped_records"


def _samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _record(run: str, status: Status, host: str = "n1", value: float = 0.0, **data: object) -> Result:
    now = datetime.now(timezone.utc)
    return Result(run_id=run, kind="health", name="ecc", where=Where(hostname=host, gpu_count=2), status=status,
                  started_at=now, finished_at=now, metrics=[Metric(name="ecc", value=value, unit="errors")],
                  data={"details": data} if data else {})


def _status(text: str, host: str = "n1") -> str:
    [status] = [s.labels["status"] for s in _samples(text)["gpuval_node_status"]
                if s.labels["host"] == host and s.value == 1.0]
    return status


def _skipped(text: str) -> float:
    return sum(s.value for s in _samples(text)[SKIPPED] if s.name.endswith("_total"))


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen]]:
    """A real `gpuval exporter` on the results file tmp_path/r.jsonl (no --address: the default bind)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuval", "exporter", "--port", str(port), "--results",
                             str(tmp_path / "r.jsonl"), "--idle-timeout", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait(port, proc)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the exporter never listened")


def _get(port: int, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.read()


def test_a_torn_line_is_skipped_counted_and_a_later_fail_still_alerts(tmp_path: Path, exporter):
    port, _ = exporter
    results = tmp_path / "r.jsonl"
    save_results([_record("r1", Status.PASS)], results, db="none")
    with results.open("a") as fh:
        fh.write('{"schema_version": 1, "id": "torn", "run_id": "r\n')  # what a full disk leaves
    status, body = _get(port)
    assert status == 200 and _status(body.decode()) == "pass" and _skipped(body.decode()) == 1.0
    save_results([_record("r2", Status.FAIL, value=3)], results, db="none")  # the next run fails
    status, body = _get(port)
    assert status == 200 and _status(body.decode()) == "fail" and _skipped(body.decode()) == 1.0


def test_a_torn_write_glued_to_the_next_record_keeps_that_record(tmp_path: Path):
    """A crash mid-write leaves no newline: the next run's first record is appended to the torn text."""
    results = tmp_path / "r.jsonl"
    with results.open("w") as fh:
        fh.write('{"schema_version": 1, "id": "torn", "run_')
    save_results([_record("r2", Status.FAIL, value=3)], results, db="none")
    source = JsonlSource(results)
    assert [r.run_id for r in source.read()] == ["r2"] and source.skipped == 1  # the torn record, counted


def test_huge_nan_and_infinite_values_are_clamped_not_a_crash(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    line = json.loads(_record("r1", Status.FAIL, gpus=[]).model_dump_json())
    line["data"]["details"]["gpus"] = [{"index": 0, "bus_id": "0000:01:00.0", "gpu_ecc": 10**400},
                                       {"index": 1, "bus_id": "0000:02:00.0", "gpu_ecc": -(10**400)}]  # an import
    other = json.loads(_record("r1", Status.FAIL, "n2").model_dump_json())
    other["metrics"][0]["value"] = float("nan")  # json.dumps writes NaN, as Python programs do
    results.write_text(json.dumps(line) + "\n" + json.dumps(other) + "\n")
    proc = run_gpuval("exporter", "--results", str(results), "--once")
    assert proc.returncode == 0, proc.stderr
    values = {(s.labels["host"], s.labels["metric"], s.labels["gpu"]): s.value
              for s in _samples(proc.stdout)["gpuval_check_value"]}
    assert values[("n1", "gpu_ecc", "0")] == float("inf") and values[("n1", "gpu_ecc", "1")] == float("-inf")
    assert values[("n2", "ecc", "")] != values[("n2", "ecc", "")]  # NaN, as the exposition format writes it


def test_a_bad_store_row_is_skipped_and_counted(tmp_path: Path):
    db = tmp_path / "fleet.db"
    save_results([_record("r-a", Status.PASS, "a"), _record("r-b", Status.FAIL, "b")], tmp_path / "r.jsonl",
                 db=f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:  # a row another program (or a damaged import) wrote
        conn.execute("UPDATE gpuval_results SET record = '{\"torn' WHERE hostname = 'a'")
    proc = run_gpuval("exporter", "--db", f"sqlite:///{db}", "--once")
    assert proc.returncode == 0, proc.stderr
    assert _status(proc.stdout, "b") == "fail" and _skipped(proc.stdout) == 1.0


def test_the_store_is_read_from_the_last_row(tmp_path: Path):
    from gpuval.operate.exporter import StoreSource

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    save_results([_record("r-a", Status.PASS, "a")], tmp_path / "r.jsonl", db=url)
    source = StoreSource(url, refresh_s=0)
    assert [r.run_id for r in source.read()] == ["r-a"]
    first = source.cursor
    save_results([_record("r-b", Status.FAIL, "b")], tmp_path / "r.jsonl", db=url)
    assert [r.run_id for r in source.read()] == ["r-b"] and source.cursor > first  # only the new row


def test_the_jsonl_file_is_read_from_the_last_offset(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    save_results([_record("r1", Status.PASS)], results, db="none")
    source = JsonlSource(results)
    assert [r.run_id for r in source.read()] == ["r1"] and source.offset == results.stat().st_size
    with results.open("r+b") as fh:  # damage what was already read: it is not read again
        fh.seek(5)
        fh.write(b"XXXX")
    save_results([_record("r2", Status.FAIL)], results, db="none")
    assert [r.run_id for r in source.read()] == ["r2"] and source.skipped == 0
    results.write_text(_record("r3", Status.PASS).model_dump_json() + "\n")  # rotated: a shorter new file
    assert [r.run_id for r in source.read()] == ["r3"]


def test_head_is_answered_without_a_body(tmp_path: Path, exporter):
    port, _ = exporter
    save_results([_record("r1", Status.PASS)], tmp_path / "r.jsonl", db="none")
    assert _get(port, "HEAD") == (200, b"")


def test_default_bind_is_loopback(exporter):
    port, proc = exporter
    assert f"http://127.0.0.1:{port}/metrics" in proc.stdout.readline()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        names = {sock.getsockname()[0]}
    outside = [a for a in _host_addresses() if a not in names and not a.startswith("127.")]
    for address in outside:  # the port is not open on the host's other addresses
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=2).close()


def _host_addresses() -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)})
    except OSError:
        return []


def test_300_half_open_connections_make_few_threads_and_are_dropped(tmp_path: Path, exporter):
    port, proc = exporter
    save_results([_record("r1", Status.PASS)], tmp_path / "r.jsonl", db="none")
    held = []
    try:
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request never finished
            held.append(sock)
        time.sleep(0.5)
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        assert threads <= 24, threads
        time.sleep(4)  # past --idle-timeout 2: every idle connection was closed by the exporter
        assert _get(port)[0] == 200
        closed = 0
        for sock in held:
            sock.settimeout(5)
            try:
                closed += sock.recv(1) == b""
            except OSError:
                closed += 1
        assert closed == 300
    finally:
        for sock in held:
            sock.close()


def test_a_store_longer_than_a_batch_is_read_whole_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from gpuval.operate import exporter as module
    from gpuval.results.store import open_store

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    open_store(url).add([_record(f"r{i}", Status.PASS, f"h{i}") for i in range(250)])
    monkeypatch.setattr(module, "BATCH", 100)
    source = module.StoreSource(url, refresh_s=0)
    assert len({r.where.hostname for r in source.read()}) == 250 and source.cursor == 250
