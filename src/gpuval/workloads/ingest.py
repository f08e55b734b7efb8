"""The log readers (READERS: the one list `gpuval parse` and `gpuval import` use) and the import of job outputs as
Result records: gpuval JSON Lines as they are, and every document a reader finds, by its kind.

A reader returns typed documents (each with `to_json()`); `records` turns one into Result records through the
workload's own factory (collective_record, health_record, lammps_record), with the `where` the log gives. A log says
what it measured, rarely where: the host is the one given (`--host`), else the one the log names, else the file's name
(per-node logs are usually named after their node). A kind gpuval reads but cannot store yet is skipped with a
message, never an error.
"""

from __future__ import annotations

import codecs
import json
import stat
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from gpuval.baselines import BaselineSource, baseline_source
from gpuval.baselines.transport import judge_transport, socket_causes
from gpuval.checks.fabric import nccl_transport
from gpuval.collectives import nccl_debug, nccltests_parse
from gpuval.collectives.logtext import MAX_LINE
from gpuval.collectives.nccl_debug import NcclNetwork
from gpuval.collectives.nccltests_parse import NcclTestsDocument
from gpuval.errors import GpuvalError, UsageError
from gpuval.results import Result, Where
from gpuval.results.sink import iter_results
from gpuval.workloads.collective.records import collective_record
from gpuval.workloads.health.records import health_record
from gpuval.workloads.lammps import log as lammps_log
from gpuval.workloads.lammps.log import LammpsRun
from gpuval.workloads.lammps.records import lammps_record


@dataclass
class Origin:
    """Where imported log records are said to come from, and the baselines that judge what they say (the packaged
    ones, and the user's --baseline / --profile files)."""

    run_id: str
    host: str | None = None
    sku: str | None = None
    baselines: BaselineSource = field(default_factory=baseline_source, repr=False, compare=False)


class DocumentStream(Protocol):
    """A reader at work on one file: `feed` whole lines (any number), `close` at the end; each returns the
    documents that ended there."""

    def feed(self, text: str) -> list[Any]: ...

    def close(self) -> list[Any]: ...


@dataclass(frozen=True)
class Reader:
    """One kind of log gpuval understands: a stream of its documents per file, and how one becomes Result records
    (None: gpuval reads this kind but does not store it yet)."""

    kind: str
    stream: Callable[[str], DocumentStream]  # source -> a stream of typed documents, each with to_json()
    records: Callable[[Any, Origin, Path], list[Result]] | None = None

    def read(self, text: str, source: str) -> list[Any]:
        """Every document in a whole text."""
        stream = self.stream(source)
        return [*stream.feed(text), *stream.close()]


@dataclass
class FileImport:
    """What one file gave: how many records of which kinds and runs (the records themselves when no sink took
    them), and the documents, lines or errors that gave none."""

    path: Path
    records: list[Result] = field(default_factory=list)
    count: int = 0
    kinds: Counter = field(default_factory=Counter)
    run_ids: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None

    def add(self, records: list[Result], sink: Callable[[list[Result]], Any] | None) -> None:
        """Count records, then hand them to the sink (else keep them)."""
        self.count += len(records)
        self.kinds.update(f"{r.kind} {r.name}" for r in records)
        self.run_ids.update(r.run_id for r in records)
        if sink is None:
            self.records += records
        elif records:
            sink(records)


def _host(origin: Origin, named: list[str], path: Path) -> str:
    return origin.host or (named[0] if named else None) or path.stem


def _started(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _collective(doc: NcclTestsDocument, origin: Origin, path: Path) -> list[Result]:
    table = doc.table
    host = _host(origin, table.hosts, path)
    when = _started(path)
    where = Where(hostname=host, sku=origin.sku, ranks=table.nranks, engine="import")
    params = {"source": str(path), "nranks": table.nranks, "collective_inferred": table.collective_inferred}
    return [collective_record(table, where, origin.run_id, params, when, finished=when)]


def _lammps(run: LammpsRun, origin: Origin, path: Path) -> list[Result]:
    params = {k: v for k in ("version", "units", "procs", "omp_threads", "steps", "atoms")
              if (v := getattr(run, k)) is not None}
    when = _started(path)
    where = Where(hostname=_host(origin, [], path), sku=origin.sku, ranks=run.procs, engine="import")
    return [lammps_record(run, name=run.benchmark or "lammps", where=where, run_id=origin.run_id, started=when,
                          params={"source": str(path), **params}, finished=when)]


def _expected_hcas(origin: Origin) -> int | None:
    """The HCAs the node's baseline expects (its SKU's, or the user's profile; the source loads each once)."""
    baseline = origin.baselines(origin.sku)
    band = baseline.band("ib_hcas") if baseline else None
    return int(band.expected) if band and band.expected is not None else None


def _nccl_debug(net: NcclNetwork, origin: Origin, path: Path) -> list[Result]:
    """The log judged by the one transport verdict; whether the node has HCAs comes from the SKU's baseline
    (--sku, or --profile), since an imported log is not this machine: without either a socket log is not judged."""
    if net.transport is None:  # GDR, NVLS or CollNet lines without the network: read (parse), nothing to judge
        return []
    status, reason, facts = judge_transport(net, _expected_hcas(origin), None, socket_causes(net))
    value, expected = facts.pop("transport", None), facts.pop("expected", None)
    result = nccl_transport.result(status, value, expected, "", reason, **facts)
    when = _started(path)
    where = Where(hostname=_host(origin, net.hosts, path), sku=origin.sku, engine="import")
    return [health_record(result, where, origin.run_id, when, {"source": str(path)}, finished=when)]


READERS: list[Reader] = [
    Reader(nccltests_parse.KIND, nccltests_parse.NcclTestsStream, _collective),
    Reader(nccl_debug.KIND, nccl_debug.NcclDebugStream, _nccl_debug),
    Reader(lammps_log.KIND, lammps_log.LammpsDocuments, _lammps),
]

CHUNK = 1024**2  # bytes read at a time: memory stays this, whatever the file's size


def _regular_file(path: Path) -> None:
    """A log is a regular file: a FIFO would wait for a writer forever, /dev/zero never ends."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path}: cannot read (Is a directory)")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path}: not a regular file (a FIFO, socket or device): give a log file")


def _cut(text: str) -> int:
    """Where the last whole line of `text` ends (after its \n or \r), 0 when none does."""
    return max(text.rfind("\n"), text.rfind("\r")) + 1


def text_chunks(path: Path, chunk: int = CHUNK) -> Iterator[str]:
    """A log file's text in pieces of whole lines (UTF-8, bad bytes replaced), about `chunk` bytes each; a line
    longer than MAX_LINE is cut there (nothing a reader looks for is that long)."""
    _regular_file(path)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    carry, skipping = "", False
    try:
        with path.open("rb") as fh:
            while block := fh.read(chunk):
                text = carry + decoder.decode(block)
                if skipping:  # the rest of an overlong line
                    end = _cut(text[:MAX_LINE + 1]) or _cut(text)
                    text, skipping = (text[end:], False) if end else ("", True)
                end = _cut(text)
                if end:
                    yield text[:end]
                carry = text[end:]
                if len(carry) > MAX_LINE:
                    yield carry[:MAX_LINE] + "\n"
                    carry, skipping = "", True
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    tail = carry + decoder.decode(b"", final=True)
    if tail and not skipping:
        yield tail


def read_text(path: Path) -> str:
    """A (small) log file's whole text; an unreadable file is a one-line error."""
    return "".join(text_chunks(path))


def iter_documents(path: Path) -> Iterator[tuple[Reader, Any]]:
    """Every document of every kind in one file, as each is found, in one pass over the file (one file can hold
    several kinds: an nccl-tests table with NCCL INFO lines); a file that holds none is an error naming it."""
    streams = [(reader, reader.stream(str(path))) for reader in READERS]
    found = 0
    for text in text_chunks(path):
        for reader, stream in streams:
            for doc in stream.feed(text):
                found += 1
                yield reader, doc
    for reader, stream in streams:
        for doc in stream.close():
            found += 1
            yield reader, doc
    if not found:
        kinds = ", ".join(r.kind for r in READERS)
        raise UsageError(f"{path}: no test or log gpuval can read was found in it (looked for: {kinds})")


def parse_file(path: Path) -> list[tuple[Reader, Any]]:
    """All documents of every kind in one file, held at once (the tests' way to read a log whole; commands stream
    with iter_documents)."""
    return list(iter_documents(path))


def _is_jsonl(path: Path, look: int = 8) -> bool:
    """Whether the file is gpuval's JSON Lines: one of its first non-blank lines is a record (the first may be the
    torn one)."""
    _regular_file(path)
    try:
        with path.open(errors="replace") as fh:
            for _ in range(look * 4):
                line = fh.readline(MAX_LINE)
                if not line:
                    return False
                if not line.strip():
                    continue
                look -= 1
                if line.lstrip().startswith("{") and _is_record(line):
                    return True
                if look == 0:
                    return False
    except OSError:
        return False
    return False


def _is_record(line: str) -> bool:
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and {"run_id", "kind", "where"} <= doc.keys()


BATCH = 2000  # records handed to the sink at a time


def _import_jsonl(path: Path, found: FileImport, sink: Callable[[list[Result]], Any] | None) -> None:
    """gpuval's own records; a torn or foreign line (what a full disk or a crash leaves) is skipped and named,
    the others are kept."""
    batch: list[Result] = []
    for record in iter_results(path, lambda lineno, why: found.skipped.append(f"{path}:{lineno}: {why}")):
        batch.append(record)
        if len(batch) >= BATCH:
            found.add(batch, sink)
            batch = []
    found.add(batch, sink)


def import_file(path: Path, origin: Origin, sink: Callable[[list[Result]], Any] | None = None) -> FileImport:
    """The records in one file, handed to `sink` in batches as they are read (without a sink they are kept in
    `records`); a file gpuval cannot read is reported in `error`, not raised."""
    found = FileImport(path)
    try:
        if _is_jsonl(path):
            _import_jsonl(path, found, sink)
            return found
        batch: list[Result] = []
        for reader, doc in iter_documents(path):
            if reader.records is None:
                found.skipped.append(f"{path}: a {reader.kind!r} document: gpuval does not store this kind yet")
                continue
            try:
                batch += reader.records(doc, origin, path)
            except (KeyError, TypeError, ValueError) as exc:
                found.skipped.append(f"{path}: a {reader.kind!r} document lacks what a record needs ({exc})")
            if len(batch) >= BATCH:
                found.add(batch, sink)
                batch = []
        found.add(batch, sink)
    except GpuvalError as exc:
        found.error = str(exc)
    return found
