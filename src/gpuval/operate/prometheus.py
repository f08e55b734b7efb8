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

Both show each host's newest run per kind (`LatestRuns`, THE latest-run rule). prometheus_client writes the
exposition text (label values escaped); the textfile is written beside its target and renamed over it
(results.files.write_beside): node_exporter never reads half a file.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuval.errors import UsageError
from gpuval.results.data import HealthData
from gpuval.results.files import write_beside
from gpuval.results.model import Result, Status, severity
from gpuval.results.verdict import node_verdict

STATUSES = [s.value for s in Status]
CHECK_LABELS = ["host", "sku", "kind", "check"]
VALUE_LABELS = ["host", "sku", "kind", "check", "metric", "gpu", "bus_id", "unit", "size_bytes"]
NODE_LABELS = ["host", "sku", "kind"]
CLOCK_SKEW_S = 300.0  # how far in the future a record's time may be and still be believed
MAX_HOSTS = 10_000  # hosts kept: a fleet's nodes, with room; beyond it, records are dropped and counted
MAX_NAMES = 512  # check names a host keeps: gpuval's checks and sweeps name under a hundred; beyond, dropped too
RUNS_KEPT = 2


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


@dataclass(eq=False)  # a collector is registered by identity
class Families:
    """A prometheus_client collector of metric families built beforehand (the exporter's and the textfile's)."""

    families: list[Any]

    def describe(self) -> list[Any]:
        return []  # registering must not collect

    def collect(self) -> Iterable[Any]:
        return self.families


def registry(families: list[Any]) -> Any:
    """A registry of these families only (never the process's own metrics)."""
    from prometheus_client import CollectorRegistry

    chosen = CollectorRegistry(auto_describe=False)
    chosen.register(Families(families))
    return chosen


def exposition(records: Iterable[Result]) -> str:
    """The metrics as Prometheus text (what the textfile holds and the exporter serves)."""
    from prometheus_client import generate_latest

    return generate_latest(registry(metric_families(latest(records)))).decode()


def check_textfile(path: Path) -> Path:
    """The textfile's name, if node_exporter will read it (it must end in .prom); checked before a run starts."""
    if path.suffix != ".prom":
        raise UsageError(f"--prometheus {path}: the name must end in .prom (node_exporter's textfile collector "
                         "reads only *.prom files)")
    return path


def write_textfile(records: Iterable[Result], path: Path) -> Path:
    """Write the records' metrics for node_exporter's textfile collector, atomically (results.files.write_beside:
    a temporary file in the same folder, renamed over the target)."""
    from prometheus_client import generate_latest

    check_textfile(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = generate_latest(registry(metric_families(latest(records))))
    try:  # node_exporter runs as another account: the file is readable by all, as prometheus_client wrote it
        write_beside(path.parent, path.name, text, 0o644, folder_link=True)
    except OSError as exc:  # a full disk says only "No space left on device": name the file
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    return path


def _ended(record: Result) -> float:
    return (record.finished_at or record.started_at).timestamp()


@dataclass
class _Run:
    run_id: str
    ended: float  # when its latest record ended
    arrived: int  # order of arrival: of two runs that ended at once, the later read is the newer
    records: list[Result] = field(default_factory=list)


class LatestRuns:
    """THE latest-run rule: for each host and kind, the records of its newest run, the run whose latest record
    ended last (a host's health and its NCCL sweep are separate runs: one does not hide the other). Fed in pieces
    (the exporter reads on from where it stopped), each record looked at once: the cost is linear in the records.

    - A record dated beyond now plus `skew_s` (a wrong clock, a forged time) is refused and counted (`future`):
      it would otherwise hide every later run of its host until that date.
    - At most `max_hosts` hosts are kept, and MAX_NAMES check names a host; records of further hosts or names are
      dropped and counted (`dropped`): memory and the exposition stay bounded whatever names the records carry.
    - The RUNS_KEPT newest runs of a host and kind are held, so two runs that interleave (a quick check written
      in the middle of a long full one) each keep all their records."""

    def __init__(self, max_hosts: int = MAX_HOSTS, skew_s: float = CLOCK_SKEW_S) -> None:
        self.runs: dict[tuple[str, str], list[_Run]] = {}  # newest first
        self.names: dict[str, set[str]] = {}  # host -> the check names it keeps
        self.max_hosts, self.skew_s = max_hosts, skew_s
        self.future = 0
        self.dropped = 0
        self._arrivals = 0

    def add(self, records: Iterable[Result]) -> int:
        """Fold new records in; returns how many came."""
        horizon = time.time() + self.skew_s
        count = 0
        for count, record in enumerate(records, 1):
            self._add(record, horizon)
        return count

    def _add(self, record: Result, horizon: float) -> None:
        ended = _ended(record)
        if ended > horizon:
            self.future += 1
            return
        if not self._kept(record.where.hostname, record.name):
            self.dropped += 1
            return
        host = record.where.hostname
        runs = self.runs.setdefault((host, record.kind), [])
        run = next((r for r in runs if r.run_id == record.run_id), None)
        if run is None:
            self._arrivals += 1
            run = _Run(record.run_id, ended, self._arrivals)
            runs.append(run)
        run.records.append(record)
        run.ended = max(run.ended, ended)
        runs.sort(key=lambda r: (r.ended, r.arrived), reverse=True)  # at most RUNS_KEPT + 1 runs
        del runs[RUNS_KEPT:]

    def _kept(self, host: str, name: str) -> bool:
        """Whether a record of this host and check name is kept: a known pair, or a new one within the bounds."""
        names = self.names.get(host)
        if names is None:
            if len(self.names) >= self.max_hosts:
                return False
            names = self.names[host] = set()
        if name not in names:
            if len(names) >= MAX_NAMES:
                return False
            names.add(name)
        return True

    def records(self) -> list[Result]:
        """The records of every host's and kind's newest run."""
        return [r for runs in self.runs.values() for r in runs[0].records]


def latest(records: Iterable[Result]) -> list[Result]:
    """For each host and kind, the records of its newest run only (`LatestRuns`)."""
    runs = LatestRuns()
    runs.add(records)
    return runs.records()
