"""Job outputs as Result records: gpuval JSON Lines as they are, and every log `gpuval parse` reads, by its kind.

A log says what it measured, rarely where: the host is the one given (`--host`), else the one the log names, else the
file's name (per-node logs are usually named after their node). A kind gpuval reads but cannot store yet is skipped
with a message, never an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpuval.errors import GpuvalError
from gpuval.results import Result, Status, Where, read_results


@dataclass
class Origin:
    """Where imported log records are said to come from."""

    run_id: str
    host: str | None = None
    sku: str | None = None


@dataclass
class FileImport:
    """What one file gave: records, and the documents or errors that gave none."""

    path: Path
    records: list[Result] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None


def _is_jsonl(path: Path) -> bool:
    try:
        with path.open(errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
        doc = json.loads(first)
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and {"run_id", "kind", "where"} <= doc.keys()


def _host(origin: Origin, doc: dict[str, Any], path: Path) -> str:
    hosts = doc.get("hosts") or []
    return origin.host or doc.get("hostname") or (hosts[0] if hosts else None) or path.stem


def _started(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _collective(doc: dict[str, Any], origin: Origin, path: Path) -> Result:
    from gpuval.collectives.nccltests_parse import table_from_document
    from gpuval.workloads.collective import sweep_metrics

    table = table_from_document(doc)
    wrong = table.total_wrong()
    host = _host(origin, doc, path)
    status, reason = Status.PASS, ""
    if wrong:
        status, reason = Status.FAIL, f"{wrong} wrong elements: the collective returned incorrect data"
    elif table.collective is None:  # never PASS for what could not be judged
        status, reason = Status.SKIPPED, ("not judged: the log names no collective and its table does not prove "
                                          "one (nccl-tests before 2.17.4 prints no name)")
    return Result(
        run_id=origin.run_id, kind="collective", name=table.collective or "unknown", started_at=_started(path),
        where=Where(hostname=host, sku=origin.sku, ranks=table.nranks, engine="import"),
        params={"source": str(path), "nranks": table.nranks, "collective_inferred": table.collective_inferred},
        metrics=sweep_metrics(table), status=status, reason=reason,
        data={"results": doc["results"], "hosts": doc.get("hosts") or [host]},
    )


def _lammps_benchmark(path: Path) -> str:
    """The benchmark of a log gpuval's inputs wrote (they name themselves in their first comment, which LAMMPS
    echoes into log.lammps), else "lammps"."""
    from gpuval.parsers import read_text
    from gpuval.workloads.lammps.inputs import benchmark_of_log

    return benchmark_of_log(read_text(path)) or "lammps"


def _lammps(doc: dict[str, Any], origin: Origin, path: Path) -> Result:
    from gpuval.workloads.lammps.runner import log_metrics

    metrics = log_metrics(doc)
    params = {k: doc[k] for k in ("version", "units", "procs", "omp_threads", "steps", "atoms") if doc.get(k) is not None}
    return Result(
        run_id=origin.run_id, kind="lammps", name=_lammps_benchmark(path), started_at=_started(path),
        where=Where(hostname=_host(origin, doc, path), sku=origin.sku, ranks=doc.get("procs"), engine="import"),
        params={"source": str(path), **params}, metrics=metrics,
        status=Status.PASS if metrics else Status.ERROR,
        reason="" if metrics else "the log has no Performance line: the run did not finish",
        data={"breakdown": doc.get("breakdown")},
    )


def _nccl_debug(doc: dict[str, Any], origin: Origin, path: Path) -> Result:
    transport = str(doc.get("transport") or "unknown")
    socket = transport.lower() == "socket"
    return Result(
        run_id=origin.run_id, kind="health", name="nccl_transport", started_at=_started(path),
        where=Where(hostname=_host(origin, doc, path), sku=origin.sku, engine="import"),
        params={"source": str(path)}, status=Status.WARN if socket else Status.PASS,
        reason=(f"NCCL used TCP sockets ({doc.get('evidence', '')}): a fault on a node with InfiniBand"
                if socket else f"NCCL transport {transport}"),
        data=doc,
    )


CONVERTERS: dict[str, Callable[[dict[str, Any], Origin, Path], Result]] = {
    "nccl-tests": _collective,
    "lammps": _lammps,
    "nccl-debug": _nccl_debug,
}


def import_file(path: Path, origin: Origin) -> FileImport:
    """The records in one file; a file gpuval cannot read is reported in `error`, not raised."""
    from gpuval.parsers import parse_file

    found = FileImport(path)
    try:
        if _is_jsonl(path):
            found.records = read_results(path)
            return found
        for _reader, doc in parse_file(path):
            convert = CONVERTERS.get(doc.get("kind", ""))
            if convert is None:
                found.skipped.append(f"{path}: a {doc.get('kind')!r} document: gpuval does not store this kind yet")
                continue
            try:
                found.records.append(convert(doc, origin, path))
            except (KeyError, TypeError, ValueError) as exc:
                found.skipped.append(f"{path}: a {doc.get('kind')!r} document lacks what a record needs ({exc})")
    except GpuvalError as exc:
        found.error = str(exc)
    return found
