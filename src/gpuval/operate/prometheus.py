"""Prometheus metrics from Result records: a node_exporter textfile (`--prometheus FILE`) and the gauges the
exporter serves (`gpuval exporter`, operate/exporter.py: the latest records of the JSON Lines file or the store).

One set of gauges, built by one function for both:
- gpuval_check_status{host,sku,kind,check,status}: 1 for the check's status, 0 for the four others (a state set:
  alert on `gpuval_check_status{status="fail"} == 1`).
- gpuval_check_value{host,sku,kind,check,metric,gpu,bus_id,unit,size_bytes}: each measured figure; `gpu` and
  `bus_id` are the NVML index and PCI bus id of a per-GPU figure (the record's one per-GPU form, read by
  HealthData.per_gpu), "" for node-wide ones.
- gpuval_node_status{host,sku,kind,status}: the run's verdict (THE node verdict, results.verdict.node_verdict, over
  the run's records of that kind), as a state set.
- gpuval_run_info{host,sku,kind,run_id} 1, and gpuval_run_timestamp_seconds{host,sku,kind}: which run the figures
  come from and when it ended. The run id is a label of this one series only, so every new run does not start
  new series for every check.

prometheus_client writes the exposition text (label values escaped) and the textfile (to a temporary file in
the same folder, then renamed over the target: node_exporter never reads half a file).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gpuval.errors import UsageError
from gpuval.results.data import HealthData
from gpuval.results.model import Result, Status, severity
from gpuval.results.verdict import node_verdict

STATUSES = [s.value for s in Status]
CHECK_LABELS = ["host", "sku", "kind", "check"]
VALUE_LABELS = ["host", "sku", "kind", "check", "metric", "gpu", "bus_id", "unit", "size_bytes"]
NODE_LABELS = ["host", "sku", "kind"]


def _base(record: Result) -> tuple[str, str, str]:
    return record.where.hostname, record.where.sku or "", record.kind


def gauge(value: float | int) -> float:
    """A figure as the exposition format holds it: an integer beyond a float (10**400 from an imported line) is
    +Inf or -Inf, not an OverflowError that blanks every host's metrics; NaN and infinities pass as they are."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _values(record: Result) -> Iterator[tuple[tuple[str, ...], float]]:
    """(labels, value) of every figure: the record's metrics, then a health record's per-GPU figures."""
    host, sku, kind = _base(record)
    for m in record.metrics:
        if m.value is not None:
            size = "" if m.size_bytes is None else str(m.size_bytes)
            yield (host, sku, kind, record.name, m.name, "", "", m.unit, size), gauge(m.value)
    if isinstance(record.data, HealthData):
        for gpu in record.data.per_gpu():
            for name, value in gpu.figures.items():
                yield ((host, sku, kind, record.name, name, str(gpu.index), gpu.bus_id, record.data.unit_of(name), ""),
                       gauge(value))


def metric_families(records: Iterable[Result]) -> list[Any]:
    """The gauges of these records (one series per label set: a repeated check keeps its worst status and its
    last value, so the exposition never holds a duplicate sample)."""
    from prometheus_client.core import GaugeMetricFamily

    checks: dict[tuple[str, ...], Status] = {}
    values: dict[tuple[str, ...], float] = {}
    nodes: dict[tuple[str, ...], list[Result]] = {}
    runs: dict[tuple[str, ...], tuple[float, str]] = {}
    for r in records:
        base = _base(r)
        key = (*base, r.name)
        if key not in checks or severity(r.status) > severity(checks[key]):
            checks[key] = r.status
        nodes.setdefault(base, []).append(r)
        values.update(_values(r))
        ended = (r.finished_at or r.started_at).timestamp()
        runs[base] = max(runs.get(base, (0.0, "")), (ended, r.run_id))
    status = GaugeMetricFamily("gpuval_check_status", "Status of a gpuval check (1 = the current status).",
                               labels=[*CHECK_LABELS, "status"])
    for key, current in sorted(checks.items()):
        for name in STATUSES:
            status.add_metric([*key, name], 1.0 if current.value == name else 0.0)
    value = GaugeMetricFamily("gpuval_check_value", "A figure a gpuval check measured.", labels=VALUE_LABELS)
    for key, figure in sorted(values.items()):
        value.add_metric(list(key), figure)
    node = GaugeMetricFamily("gpuval_node_status", "Verdict of the node's latest gpuval run (1 = the verdict).",
                             labels=[*NODE_LABELS, "status"])
    info = GaugeMetricFamily("gpuval_run_info", "The gpuval run the figures come from.",
                             labels=[*NODE_LABELS, "run_id"])
    stamp = GaugeMetricFamily("gpuval_run_timestamp_seconds", "When that gpuval run ended (Unix time).",
                              labels=NODE_LABELS)
    for key, judged in sorted(nodes.items()):
        verdict = node_verdict(judged).status
        for name in STATUSES:
            node.add_metric([*key, name], 1.0 if verdict.value == name else 0.0)
        ended, run_id = runs[key]
        info.add_metric([*key, run_id], 1.0)
        stamp.add_metric(list(key), ended)
    return [status, value, node, info, stamp]


class _Records:
    """A prometheus_client collector of these records' gauges."""

    def __init__(self, records: list[Result]) -> None:
        self.records = records

    def describe(self) -> list[Any]:
        return []  # registering must not build the gauges

    def collect(self) -> Iterator[Any]:
        yield from metric_families(self.records)


def _registry(records: list[Result]) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Records(records))
    return registry


def exposition(records: Iterable[Result]) -> str:
    """The metrics as Prometheus text (what the textfile holds and the exporter serves)."""
    from prometheus_client import generate_latest

    return generate_latest(_registry(latest(records))).decode()


def check_textfile(path: Path) -> Path:
    """The textfile's name, if node_exporter will read it (it must end in .prom); checked before a run starts."""
    if path.suffix != ".prom":
        raise UsageError(f"--prometheus {path}: the name must end in .prom (node_exporter's textfile collector "
                         "reads only *.prom files)")
    return path


def write_textfile(records: Iterable[Result], path: Path) -> Path:
    """Write the records' metrics for node_exporter's textfile collector, atomically (temporary file + rename)."""
    from prometheus_client import write_to_textfile

    check_textfile(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_to_textfile(str(path), _registry(latest(records)))
    except OSError as exc:  # a full disk says only "No space left on device": name the file
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    return path


def end_of(path: Path) -> int:
    """Where a JSON Lines file ends now (0 if it does not exist): a run's records are appended after it."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def run_records(path: Path, run_id: str, offset: int = 0) -> list[Result]:
    """The records of one run in a JSON Lines file, read from `offset` (`end_of` the file when the run began), so
    a long history is not read again; another writer's lines in between are left out by their run id."""
    from pydantic import ValidationError

    chosen: list[Result] = []
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            for line in fh:
                try:
                    record = Result.model_validate_json(line)
                except ValidationError:
                    continue  # not a record (a line cut by a crash): the run's own records are whole lines
                if record.run_id == run_id:
                    chosen.append(record)
    except FileNotFoundError:
        return []
    return chosen


def latest(records: Iterable[Result]) -> list[Result]:
    """For each host and kind, the records of its newest run only (a host's health and its NCCL sweep are
    separate runs: one does not hide the other)."""
    runs: dict[tuple[str, str], dict[str, list[Result]]] = {}
    for r in records:
        runs.setdefault((r.where.hostname, r.kind), {}).setdefault(r.run_id, []).append(r)
    chosen: list[Result] = []
    for by_run in runs.values():
        newest = max(by_run.values(), key=lambda rs: max(x.finished_at or x.started_at for x in rs))
        chosen.extend(newest)
    return chosen
