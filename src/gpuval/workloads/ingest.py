"""The log readers (READERS: the one list `gpuval parse` and `gpuval import` use) and the import of job outputs as
Result records: gpuval JSON Lines as they are, and every document a reader finds, by its kind.

A reader returns typed documents (each with `to_json()`); `records` turns one into Result records through the
workload's own factory (collective_record, health_record, lammps_record), with the `where` the log gives. A log says
what it measured, rarely where: the host is the one given (`--host`), else the one the log names, else the file's name
(per-node logs are usually named after their node). A kind gpuval reads but cannot store yet is skipped with a
message, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpuval.baselines import find_baseline
from gpuval.baselines.transport import judge_transport, socket_causes
from gpuval.checks.fabric import nccl_transport
from gpuval.collectives import nccl_debug, nccltests_parse
from gpuval.collectives.nccl_debug import NcclNetwork
from gpuval.collectives.nccltests_parse import NcclTestsDocument
from gpuval.errors import GpuvalError, UsageError
from gpuval.results import Result, Where, read_results
from gpuval.workloads.collective.records import collective_record
from gpuval.workloads.health.records import health_record
from gpuval.workloads.lammps import log as lammps_log
from gpuval.workloads.lammps.log import LammpsRun
from gpuval.workloads.lammps.records import lammps_record


@dataclass
class Origin:
    """Where imported log records are said to come from."""

    run_id: str
    host: str | None = None
    sku: str | None = None


@dataclass(frozen=True)
class Reader:
    """One kind of log gpuval understands: its documents, and how one becomes Result records (None: gpuval reads
    this kind but does not store it yet)."""

    kind: str
    read: Callable[[str, str], list[Any]]  # (text, source) -> typed documents, each with to_json()
    records: Callable[[Any, Origin, Path], list[Result]] | None = None


@dataclass
class FileImport:
    """What one file gave: records, and the documents or errors that gave none."""

    path: Path
    records: list[Result] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None


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


def _nccl_debug(net: NcclNetwork, origin: Origin, path: Path) -> list[Result]:
    """The log judged by the one transport verdict; whether the node has HCAs comes from the SKU's baseline
    (--sku), since an imported log is not this machine: without a SKU a socket log is not judged."""
    baseline = find_baseline(origin.sku) if origin.sku else None
    band = baseline.band("ib_hcas") if baseline else None
    expected = int(band.expected) if band and band.expected is not None else None
    status, reason, facts = judge_transport(net, expected, None, socket_causes(net))
    value, expected = facts.pop("transport", None), facts.pop("expected", None)
    result = nccl_transport.result(status, value, expected, "", reason, **facts)
    when = _started(path)
    where = Where(hostname=_host(origin, net.hosts, path), sku=origin.sku, engine="import")
    return [health_record(result, where, origin.run_id, when, {"source": str(path)}, finished=when)]


def _nccl_debug_documents(text: str, source: str) -> list[NcclNetwork]:
    found = nccl_debug.read_nccl_network(text, source)
    return [found] if found else []


READERS: list[Reader] = [
    Reader(nccltests_parse.KIND, nccltests_parse.read_documents, _collective),
    Reader(nccl_debug.KIND, _nccl_debug_documents, _nccl_debug),
    Reader(lammps_log.KIND, lammps_log.read_documents, _lammps),
]


def read_text(path: Path) -> str:
    """A log file's text; an unreadable or binary file is a one-line error."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    return raw.decode("utf-8", errors="replace")


def parse_file(path: Path) -> list[tuple[Reader, Any]]:
    """All documents of every kind in one file (one file can hold several kinds: an nccl-tests table with NCCL
    INFO lines); a file that holds none is an error naming it."""
    text = read_text(path)
    found = [(reader, doc) for reader in READERS for doc in reader.read(text, str(path))]
    if not found:
        kinds = ", ".join(r.kind for r in READERS)
        raise UsageError(f"{path}: no test or log gpuval can read was found in it (looked for: {kinds})")
    return found


def _is_jsonl(path: Path) -> bool:
    try:
        with path.open(errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
        doc = json.loads(first)
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and {"run_id", "kind", "where"} <= doc.keys()


def import_file(path: Path, origin: Origin) -> FileImport:
    """The records in one file; a file gpuval cannot read is reported in `error`, not raised."""
    found = FileImport(path)
    try:
        if _is_jsonl(path):
            found.records = read_results(path)
            return found
        for reader, doc in parse_file(path):
            if reader.records is None:
                found.skipped.append(f"{path}: a {reader.kind!r} document: gpuval does not store this kind yet")
                continue
            try:
                found.records += reader.records(doc, origin, path)
            except (KeyError, TypeError, ValueError) as exc:
                found.skipped.append(f"{path}: a {reader.kind!r} document lacks what a record needs ({exc})")
    except GpuvalError as exc:
        found.error = str(exc)
    return found
