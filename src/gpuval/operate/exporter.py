"""`gpuval exporter`: the latest records as Prometheus metrics, served so that no input and no client blinds it.

- Sources read incrementally: the JSON Lines file through THE record file reader (`results.sink.JsonlReader`:
  from the byte where the last read stopped, rotation and copytruncate seen, a torn line skipped, only a regular
  file opened), the store from the row after the last one read. A line or row that is no record is skipped and
  counted (`gpuval_exporter_skipped_records_total`), never an HTTP 500: one torn line from a full disk must not hide
  every later FAIL from the alert. A results path that is a symlink, a FIFO or a device is a 503 (`--once`: exit 2).
- What is kept is each host's newest run per kind (`prometheus.LatestRuns`, the one latest-run rule), not the whole
  history: memory follows the fleet, up to a bound on hosts; records dated in the future are refused. Both are
  counted (`gpuval_exporter_future_records_total`, `gpuval_exporter_dropped_records_total`).
- One thread reads every request and writes every answer, non-blocking, each with a deadline (`idle_timeout`,
  renewed while bytes move): idle, half-open and slow-reading connections cost a socket, never a thread. A few
  workers only render. Connections are bounded in all and per peer; past a bound the oldest connection (of that
  peer) is closed to make room, so a client holding hundreds of idle connections cannot keep a scrape out. GET
  and HEAD.
"""

from __future__ import annotations

import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuval.errors import GpuvalError, UsageError
from gpuval.operate.prometheus import MAX_HOSTS, MAX_NAMES, LatestRuns, metric_families, registry
from gpuval.results.model import Result
from gpuval.results.sink import parse_line
from gpuval.results.store import OVERLAP

_MAX_REQUEST = 16 * 1024
MAX_CONNECTIONS = 512
PER_PEER = 128
_WORKERS = 4
BATCH = 20_000  # store rows per query (more than store.OVERLAP, so every full batch moves on)


class Source(Protocol):
    """Where records come from: `read` returns those added since the last call; `skipped` counts bad ones."""

    skipped: int

    def read(self) -> Iterable[Result]: ...


@dataclass
class StoreSource:
    """The results store read from the row after the last one read, at most every `refresh_s` seconds (scrapes
    are frequent; the store may be the fleet's PostgreSQL)."""

    url: str | None
    refresh_s: float = 15.0
    cursor: int = 0
    skipped: int = 0
    _at: float | None = None
    _seen: set[int] = field(default_factory=set)

    def read(self) -> Iterator[Result]:
        """The records stored since the last read, asked for in batches until none is left (a first read of a
        long history is never held whole)."""
        from gpuval.results.store import open_store

        now = time.monotonic()
        if self._at is not None and now - self._at < self.refresh_s:
            return
        self._at = now
        while True:
            rows = open_store(self.url).rows_after(self.cursor, limit=BATCH)
            for seq, text in rows:
                if seq in self._seen:
                    continue  # PostgreSQL: a row read in the overlap window the last time
                self._seen.add(seq)
                record, _ = parse_line(text.encode())
                if record is None:
                    self.skipped += 1
                else:
                    yield record
                self.cursor = max(self.cursor, seq)
            self._seen = {s for s in self._seen if s > self.cursor - OVERLAP}
            if len(rows) < BATCH:  # a full batch moved the cursor on: BATCH > the store's OVERLAP
                return


class Exporter:
    """A source, what was kept of it, and the exposition text of a scrape."""

    def __init__(self, source: Source, max_hosts: int = MAX_HOSTS) -> None:
        self.source = source
        self.latest = LatestRuns(max_hosts=max_hosts)
        self.lock = threading.Lock()
        self.text: bytes | None = None  # the last exposition, served again while nothing new came

    def exposition(self) -> bytes:
        """The metrics now: the source read from where it stopped, then every kept run's gauges."""
        from prometheus_client import generate_latest

        with self.lock:
            skipped_before = self.source.skipped
            if not self.latest.add(self.source.read()) and self.source.skipped == skipped_before and self.text:
                return self.text
            families = [*metric_families(self.latest.records()), *self._counters()]
            self.text = generate_latest(registry(families))
            return self.text

    def _counters(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily

        return [
            CounterMetricFamily("gpuval_exporter_skipped_records", "Lines or rows of the results that are no gpuval "
                                "record (torn, damaged), skipped.", value=self.source.skipped),
            CounterMetricFamily("gpuval_exporter_future_records", "Records dated beyond now plus the allowed clock "
                                "skew (a wrong clock or a forged time), refused.", value=self.latest.future),
            CounterMetricFamily("gpuval_exporter_dropped_records", f"Records of hosts beyond the "
                                f"{self.latest.max_hosts} kept, or of check names beyond the {MAX_NAMES} a host "
                                "keeps, dropped.", value=self.latest.dropped),
        ]


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    peer: str
    deadline: float
    data: bytes = b""
    out: list[memoryview] = field(default_factory=list)  # what is left to send of the answer (head, body)
    registered: bool = True  # in the selector: not while a worker renders its answer
    closed: bool = False


class Server:
    """A small HTTP/1.0 server of /metrics: one selector thread reads requests and writes answers (none holds a
    thread while it trickles in or out), `_WORKERS` threads render them."""

    def __init__(self, exporter: Exporter, address: str, port: int, idle_timeout: float) -> None:
        self.exporter, self.idle_timeout = exporter, idle_timeout
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((address, port))
        except OSError as exc:
            self.listener.close()
            raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.wake_in, self.wake_out = socket.socketpair()  # a worker's answer wakes the selector
        self.wake_in.setblocking(False)
        self.wake_out.setblocking(False)
        self.selector.register(self.wake_in, selectors.EVENT_READ)
        self.open: dict[socket.socket, _Connection] = {}  # every connection, the oldest first
        self.peers: dict[str, dict[socket.socket, None]] = {}  # each peer's, the oldest first
        self.answers: queue.SimpleQueue[tuple[_Connection, tuple[bytes, bytes]]] = queue.SimpleQueue()
        self.pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="gpuval-exporter")

    def serve_forever(self) -> None:
        """Accept, read, dispatch and send until interrupted."""
        while True:
            for key, events in self.selector.select(timeout=0.5):
                if key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj is self.wake_in:
                    self._take_answers()
                elif (conn := self.open.get(key.fileobj)) is None:  # type: ignore[arg-type]
                    continue  # closed earlier in this round, to make room
                elif events & selectors.EVENT_WRITE:
                    self._send(conn)
                else:
                    self._receive(conn)
            now = time.monotonic()
            for conn in [c for c in self.open.values() if c.deadline < now]:
                self._drop(conn)

    def _accept(self) -> None:
        try:
            sock, address = self.listener.accept()
        except OSError:
            return
        peer = str(address[0])
        mine = self.peers.setdefault(peer, {})
        if len(mine) >= PER_PEER:  # room made by the peer's own oldest connection, never another peer's
            self._drop(self.open[next(iter(mine))])
        elif len(self.open) >= MAX_CONNECTIONS:
            self._drop(next(iter(self.open.values())))
        sock.setblocking(False)
        conn = _Connection(sock, peer, time.monotonic() + self.idle_timeout)
        self.open[sock] = conn
        self.peers.setdefault(peer, {})[sock] = None
        self.selector.register(sock, selectors.EVENT_READ)

    def _receive(self, conn: _Connection) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        conn.data += chunk
        if not chunk or len(conn.data) > _MAX_REQUEST:
            self._drop(conn)
        elif b"\r\n\r\n" in conn.data or b"\n\n" in conn.data:
            self.selector.unregister(conn.sock)  # nothing is read while a worker renders
            conn.registered, conn.deadline = False, float("inf")
            self.pool.submit(self._answer, conn)

    def _take_answers(self) -> None:
        try:
            while self.wake_in.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                conn, parts = self.answers.get_nowait()
            except queue.Empty:
                return
            if conn.closed:
                continue  # closed to make room while it was rendered
            conn.out = [memoryview(part) for part in parts if part]
            conn.deadline = time.monotonic() + self.idle_timeout
            self.selector.register(conn.sock, selectors.EVENT_WRITE)
            conn.registered = True

    def _send(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.out[0]) if conn.out else 0
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if conn.out:
            conn.out[0] = conn.out[0][sent:]
            if not conn.out[0]:
                conn.out.pop(0)
        conn.deadline = time.monotonic() + self.idle_timeout  # a reader that keeps reading keeps its connection
        if not conn.out:
            self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn.registered:
            self.selector.unregister(conn.sock)
        del self.open[conn.sock]
        mine = self.peers[conn.peer]
        del mine[conn.sock]
        if not mine:
            del self.peers[conn.peer]
        conn.sock.close()

    def _answer(self, conn: _Connection) -> None:
        """A worker: render the answer and hand it to the selector thread, which sends it."""
        self.answers.put((conn, self._response(conn.data)))
        try:
            self.wake_out.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # the selector has wake-ups pending already

    def _response(self, request: bytes) -> tuple[bytes, bytes]:
        """(head, body) of the answer; the body is the shared exposition, never copied per request."""
        method, _, rest = request.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        kind = "text/plain; charset=utf-8"
        if method not in (b"GET", b"HEAD"):
            status, body = "405 Method Not Allowed", b"GET or HEAD\n"
        elif path not in (b"/metrics", b"/"):
            status, body = "404 Not Found", b"/metrics\n"
        else:
            try:
                status, body = "200 OK", self.exporter.exposition()
                kind = "text/plain; version=0.0.4; charset=utf-8"
            except GpuvalError as exc:  # the results cannot be read now: this scrape fails, the exporter lives on
                sys.stderr.write(f"gpuval exporter: {exc}\n")
                status, body = "503 Service Unavailable", f"{exc}\n".encode()
            except Exception as exc:  # a worker thread's failure would vanish unanswered: say it, keep serving
                sys.stderr.write(f"gpuval exporter: {type(exc).__name__}: {exc}\n")
                status, body = "500 Internal Server Error", f"{type(exc).__name__}\n".encode()
        head = (f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode()
        return head, b"" if method == b"HEAD" else body
