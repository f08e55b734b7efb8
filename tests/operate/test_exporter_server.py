"""`gpuval exporter`'s HTTP side, against clients that try to blind it: a torn line still lets a later FAIL alert;
the server binds 127.0.0.1, answers HEAD, holds a bounded number of threads and drops idle connections; a client
holding hundreds of idle connections keeps no scrape out; clients that never read hold no worker; a results path
that is a FIFO or a symlink to /dev/zero hangs neither `--once` nor a scrape. The exporter runs as a real `gpuval
exporter` subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from gpuval.results import save_results
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.records import record
from tests.operate.support import counter, node_status, scrape, served

SKIPPED = "gpuval_exporter_skipped_records"


def test_a_torn_line_is_skipped_counted_and_a_later_fail_still_alerts(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    save_results([record(Status.PASS, run="r1")], results, db="none")
    with results.open("a") as fh:
        fh.write('{"schema_version": 1, "id": "torn", "run_id": "r\n')  # what a full disk leaves
    with served(results) as (port, _):
        status, body = scrape(port)
        assert status == 200 and node_status(body.decode()) == "pass" and counter(body.decode(), SKIPPED) == 1.0
        save_results([record(Status.FAIL, run="r2", value=3)], results, db="none")  # the next run fails
        status, body = scrape(port)
        assert status == 200 and node_status(body.decode()) == "fail" and counter(body.decode(), SKIPPED) == 1.0


def test_head_is_answered_without_a_body(tmp_path: Path):
    save_results([record(Status.PASS, run="r1")], tmp_path / "r.jsonl", db="none")
    with served(tmp_path / "r.jsonl") as (port, _):
        assert scrape(port, "HEAD") == (200, b"")


def test_default_bind_is_loopback(tmp_path: Path):
    with served(tmp_path / "r.jsonl") as (port, proc):
        assert proc.stdout is not None and f"http://127.0.0.1:{port}/metrics" in proc.stdout.readline()
        outside = [a for a in _host_addresses() if not a.startswith("127.")]
        for address in outside:  # the port is not open on the host's other addresses
            with pytest.raises(OSError):
                socket.create_connection((address, port), timeout=2).close()


def _host_addresses() -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)})
    except OSError:
        return []


def test_300_half_open_connections_make_few_threads_and_are_dropped(tmp_path: Path):
    save_results([record(Status.PASS, run="r1")], tmp_path / "r.jsonl", db="none")
    held = []
    with served(tmp_path / "r.jsonl", "--idle-timeout", "2") as (port, proc):
        try:
            for _ in range(300):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request never finished
                held.append(sock)
            time.sleep(0.5)
            threads = len(os.listdir(f"/proc/{proc.pid}/task"))
            assert threads <= 24, threads
            time.sleep(4)  # past --idle-timeout 2: every idle connection was closed by the exporter
            assert scrape(port)[0] == 200
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


class _Hog(threading.Thread):
    """A client that holds `count` idle connections and opens a new one for each the server closes."""

    def __init__(self, port: int, count: int) -> None:
        super().__init__(daemon=True)
        self.port, self.count = port, count
        self.stop = threading.Event()
        self.opened = 0

    def run(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            while len(held) < self.count and not self.stop.is_set():
                try:
                    held.append(socket.create_connection(("127.0.0.1", self.port), timeout=2))
                    self.opened += 1
                except OSError:
                    break
            closed, _, _ = select.select(held, [], [], 0.05)  # readable: the server closed it
            for sock in closed:
                sock.close()
                held.remove(sock)
        for sock in held:
            sock.close()


@pytest.mark.timeout(120)
def test_a_client_holding_600_idle_connections_keeps_no_scrape_out(tmp_path: Path):
    """Past 512 connections the server closed every new one at once: one client holding 600 idle connections,
    re-opening each the server closed, failed 47 of 48 scrapes (reliability review D11 a). Now a peer holds at
    most PER_PEER connections, its own oldest making room for its next: the scrapes, from another address
    (127.0.0.2), are all answered."""
    save_results([record(Status.PASS, run="r1")], tmp_path / "r.jsonl", db="none")
    with served(tmp_path / "r.jsonl", "--idle-timeout", "30") as (port, _):
        hog = _Hog(port, 600)
        hog.start()
        try:
            deadline = time.monotonic() + 30
            while hog.opened < 600 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert hog.opened >= 600
            answered = []
            for _ in range(20):
                try:
                    answered.append(scrape(port, timeout=8, source="127.0.0.2")[0])
                except OSError as exc:
                    answered.append(type(exc).__name__)
        finally:
            hog.stop.set()
            hog.join(timeout=30)
    assert answered == [200] * 20, answered


def _big_results(path: Path, hosts: int) -> None:
    """A health record per host with 8 GPUs of 6 figures each: an exposition of several megabytes."""
    rows = [{"index": g, "bus_id": f"0000:{g:02x}:00.0", **{f"figure_{k}": float(k) for k in range(6)}}
            for g in range(8)]
    save_results([record(run=f"r{i}", host=f"host-{i:05d}", details={"gpus": rows}) for i in range(hosts)], path,
                 db="none")


@pytest.mark.timeout(180)
def test_clients_that_never_read_hold_no_worker(tmp_path: Path):
    """Four clients that sent `GET /metrics` and never read held the 4 workers in sendall until the idle timeout:
    a scrape timed out (reliability review D11 b). Now answers are written without blocking, by the thread that
    reads."""
    results = tmp_path / "r.jsonl"
    _big_results(results, 1200)
    with served(results, "--idle-timeout", "120") as (port, _):
        status, body = scrape(port, timeout=60)  # rendered once; the next scrapes get the same text
        assert status == 200 and len(body) > 8_000_000, len(body)
        stalled = []
        try:
            for _ in range(6):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # reads nothing: the answer waits
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                stalled.append(sock)
            time.sleep(2)
            started = time.monotonic()
            status, again = scrape(port, timeout=60)
            assert status == 200 and again == body and time.monotonic() - started < 30
        finally:
            for sock in stalled:
                sock.close()


@pytest.mark.timeout(120)
def test_a_fifo_or_a_symlink_to_dev_zero_hangs_nothing(tmp_path: Path):
    """`exporter --once` on a FIFO still hung after 20 s, and a scrape held the lock for good (reliability review
    D11 c): the results path is opened only as a regular file."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    for path, why in ((fifo, "not a regular file"), (zero, "symbolic link")):
        proc = run_gpuval("exporter", "--results", str(path), "--once", timeout=30)
        assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    with served(fifo) as (port, _):
        for _ in range(2):  # the scrape fails, the exporter serves on
            status, body = scrape(port, timeout=20)
            assert status == 503 and b"not a regular file" in body
