"""`gpuval exporter`: the latest records as Prometheus metrics, served so that no input and no client blinds it.

- Sources read incrementally: the JSON Lines file from the byte offset where the last read stopped (a shorter file
  is a new file: read from its start), the store from the row after the last one read. A line or row that is no
  record is skipped and counted (`gpuval_exporter_skipped_records_total`), never an HTTP 500: one torn line from a
  full disk must not hide every later FAIL from the alert.
- What is kept is each host's newest run per kind (`LatestRuns`), not the whole history: memory follows the fleet.
- One thread reads every request with a deadline (`idle_timeout`): half-open and idle connections cost a socket,
  not a thread, and are closed at the deadline; a few workers render and send the answers. GET and HEAD.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from gpuval.errors import GpuvalError, UsageError
from gpuval.results.model import Result
from gpuval.results.store import OVERLAP

_FIRST_KEY = b'{"schema_version"'  # how every record gpuval writes begins (Result's first field)
_MAX_LINE = 16 * 1024 * 1024  # a longer line is no record gpuval wrote: skipped without being held whole
_MAX_REQUEST = 16 * 1024
_MAX_CONNECTIONS = 512
_WORKERS = 4
BATCH = 20_000  # store rows per query (more than store.OVERLAP, so every full batch moves on)


class Source(Protocol):
    """Where records come from: `read` returns those added since the last call; `skipped` counts bad ones."""

    skipped: int

    def read(self) -> Iterable[Result]: ...


def _parse(raw: bytes) -> Result | None:
    try:
        return Result.model_validate_json(raw)
    except (ValidationError, ValueError, RecursionError):
        return None


@dataclass
class JsonlSource:
    """A JSON Lines file read from where the last read stopped; a line not yet ended is left for the next read."""

    path: Path
    offset: int = 0
    skipped: int = 0
    _identity: tuple[int, int] | None = None

    def read(self) -> Iterator[Result]:
        """The records appended since the last read, one at a time (a first read of a long file is never held
        whole); none while the file does not exist."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            stat = os.fstat(fh.fileno())
            if (stat.st_dev, stat.st_ino) != self._identity or stat.st_size < self.offset:
                self._identity, self.offset = (stat.st_dev, stat.st_ino), 0  # a new or rotated file
            fh.seek(self.offset)
            yield from self._lines(fh)

    def _lines(self, fh: Any) -> Iterator[Result]:
        while True:
            raw = fh.readline(_MAX_LINE)
            if not raw.endswith(b"\n"):
                if len(raw) >= _MAX_LINE:  # a monster line: skip to its end without holding it
                    self.offset += len(raw) + self._skip_rest(fh)
                    self.skipped += 1
                    continue
                return  # the end, or a line still being written
            self.offset += len(raw)
            if raw.strip():
                record = self._record(raw)
                if record is not None:
                    yield record

    def _record(self, raw: bytes) -> Result | None:
        record = _parse(raw)
        if record is None:
            self.skipped += 1
            at = raw.rfind(_FIRST_KEY)
            if at > 0:  # a write torn with no newline, the next record glued to it: that record is whole
                record = _parse(raw[at:])
        return record

    @staticmethod
    def _skip_rest(fh: Any) -> int:
        skipped = 0
        while chunk := fh.readline(_MAX_LINE):
            skipped += len(chunk)
            if chunk.endswith(b"\n"):
                break
        return skipped


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
                record = _parse(text.encode())
                if record is None:
                    self.skipped += 1
                else:
                    yield record
                self.cursor = max(self.cursor, seq)
            self._seen = {s for s in self._seen if s > self.cursor - OVERLAP}
            if len(rows) < BATCH:  # a full batch moved the cursor on: BATCH > the store's OVERLAP
                return


class LatestRuns:
    """For each host and kind, the records of its newest run only (a host's health and its NCCL sweep are separate
    runs: one does not hide the other). Fed in pieces; a run's records may arrive over several reads."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], tuple[str, list[Result]]] = {}

    def add(self, records: Iterable[Result]) -> int:
        """Fold new records in: a newer run replaces its host's and kind's, an older one is dropped. Returns how
        many records came."""
        count = 0
        for count, r in enumerate(records, 1):
            key = (r.where.hostname, r.kind)
            kept = self.runs.get(key)
            if kept is not None and kept[0] == r.run_id:
                kept[1].append(r)
            elif kept is None or _ended(r) >= max(_ended(x) for x in kept[1]):
                self.runs[key] = (r.run_id, [r])
        return count

    def records(self) -> list[Result]:
        """Every kept record."""
        return [r for _, rs in self.runs.values() for r in rs]


def _ended(record: Result) -> float:
    return (record.finished_at or record.started_at).timestamp()


class Exporter:
    """A source, what was kept of it, and the exposition text of a scrape."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.latest = LatestRuns()
        self.lock = threading.Lock()
        self.text: bytes | None = None  # the last exposition, served again while nothing new came

    def exposition(self) -> bytes:
        """The metrics now: the source read from where it stopped, then every kept run's gauges."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily

        from gpuval.operate.prometheus import metric_families

        with self.lock:
            skipped_before = self.source.skipped
            if not self.latest.add(self.source.read()) and self.source.skipped == skipped_before and self.text:
                return self.text
            families = metric_families(self.latest.records())
            skipped = CounterMetricFamily("gpuval_exporter_skipped_records", "Lines or rows of the results that "
                                          "are no gpuval record (torn, damaged), skipped.", value=self.source.skipped)
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Fixed([*families, skipped]))
            self.text = generate_latest(registry)
            return self.text


@dataclass(eq=False)  # a collector is registered by identity
class _Fixed:
    families: list[Any]

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        return self.families


@dataclass
class _Connection:
    sock: socket.socket
    deadline: float
    data: bytes = b""


class Server:
    """A small HTTP/1.0 server of /metrics: one selector thread reads requests (none holds a thread while it
    trickles in), `_WORKERS` threads answer them."""

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
        self.open: dict[socket.socket, _Connection] = {}
        self.pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="gpuval-exporter")

    def serve_forever(self) -> None:
        """Accept, read and dispatch until interrupted."""
        while True:
            for key, _ in self.selector.select(timeout=0.5):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._receive(self.open[key.fileobj])  # type: ignore[index]
            now = time.monotonic()
            for conn in [c for c in self.open.values() if c.deadline < now]:
                self._drop(conn)

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        if len(self.open) >= _MAX_CONNECTIONS:
            sock.close()  # beyond the bound: refused at once, nothing held
            return
        sock.setblocking(False)
        self.open[sock] = _Connection(sock, time.monotonic() + self.idle_timeout)
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
            self.selector.unregister(conn.sock)
            del self.open[conn.sock]
            self.pool.submit(self._answer, conn)

    def _drop(self, conn: _Connection) -> None:
        self.selector.unregister(conn.sock)
        del self.open[conn.sock]
        conn.sock.close()

    def _answer(self, conn: _Connection) -> None:
        method, _, rest = conn.data.partition(b" ")
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
            except GpuvalError as exc:  # the store cannot be read now: this scrape fails, the exporter lives on
                sys.stderr.write(f"gpuval exporter: {exc}\n")
                status, body = "503 Service Unavailable", f"{exc}\n".encode()
            except Exception as exc:  # a worker thread's failure would vanish unanswered: say it, keep serving
                sys.stderr.write(f"gpuval exporter: {type(exc).__name__}: {exc}\n")
                status, body = "500 Internal Server Error", f"{type(exc).__name__}\n".encode()
        head = (f"HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode()
        try:
            conn.sock.settimeout(self.idle_timeout)
            conn.sock.sendall(head if method == b"HEAD" else head + body)
        except OSError:
            pass  # the client went away or stalled past the timeout
        finally:
            conn.sock.close()
