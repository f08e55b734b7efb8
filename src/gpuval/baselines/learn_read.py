"""What `gpuval baseline learn` reads: gpuval's own records, one at a time, into each node's figures.

Every figure a band judges is taken from the record of the check that measured it, named by the band's metric
(gemm_bf16_tflops, hbm_memcpy_gbps, ...) and by how it was measured (`Measure`: the all_reduce's size and ranks, the
sustained load's dtype and seconds), so figures of two measurements are never pooled:

- health records: each GPU's row in `details.gpus` (gemm_tflops bf16/fp16, hbm_bandwidth memcpy/triad,
  h2d_d2h_bandwidth h2d/d2h/h2d_all/d2h_all, gemm_sustained alone and together), each GPU pair's read in
  p2p_bandwidth's `details.read_write_gbps`, each HCA's ib_write_bw, and the node's all_reduce (nccl_allreduce_node,
  nccl_ib_loopback) at its `details.size_bytes` over its `details.ranks`; and what a population is: the GPU models
  (gpu_count), the driver, the enforced power limits (power_limit), the SKU (`where`);
- collective records (`gpuval bench`, `gpuval import` of nccl-tests): all_reduce busbw per size, the mean of
  out-of-place and in-place (the figure the nccl_allreduce method measures), over the run's nodes and ranks;
- fleet records: a fleet check's node tests keep their health records (read as above); its own test records keep
  the better side per cycle, another measurement than the method's, and are not read.

Of each check, each node's newest record counts (the same record read twice, or imported twice, is one; a node's
older runs are counted and said, not pooled: a node's figures are its newest measurement). A record that could not
run (ERROR) is left out. Memory holds each node's newest figures, never the records: a file of several GB is read
line by line (results.sink.JsonlReader), the results store page by page.
"""

from __future__ import annotations

import gc
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from gpuval.baselines.model import allreduce_band_name, allreduce_figure
from gpuval.collectives.nccltests_json import rows_from_json
from gpuval.collectives.sizes import format_size
from gpuval.results.data import CollectiveData, FleetData, HealthData
from gpuval.results.model import Result, Status
from gpuval.results.sink import JsonlReader, parse_line


# health check -> (row figure, band metric, unit): the per-GPU rows (checks.figures.gpu_row)
PER_GPU: dict[str, tuple[tuple[str, str, str], ...]] = {
    "gemm_tflops": (("bf16", "gemm_bf16_tflops", "TFLOPS"), ("fp16", "gemm_fp16_tflops", "TFLOPS")),
    "hbm_bandwidth": (("memcpy", "hbm_memcpy_gbps", "GB/s"), ("triad", "hbm_triad_gbps", "GB/s")),
    "h2d_d2h_bandwidth": (("h2d", "h2d_gbps", "GB/s"), ("d2h", "d2h_gbps", "GB/s"),
                          ("h2d_all", "h2d_all_gbps", "GB/s"), ("d2h_all", "d2h_all_gbps", "GB/s")),
}
NODE_ALLREDUCE = {"nccl_allreduce_node": "allreduce_busbw_gbps", "nccl_ib_loopback": "ib_loopback_busbw_gbps"}
FACTS = ("gpu_count", "driver", "power_limit")
# The figures of the health suite a learned file is expected to hold: each one not measured is said
EXPECTED = (*(metric for figures in PER_GPU.values() for _, metric, _ in figures), "p2p_read_gbps",
            *NODE_ALLREDUCE.values())
# What is measured per GPU but learned into no band, and why (said in the file's left_out)
NOT_LEARNED = {
    "p2p_write_gbps": "no method of gpuval's (_methods.yaml) measures the copy-engine write: a band of it would name "
                      "none, so it is judged by its peers only",
    "clocks_under_load": "SM clock and power under load are judged by the slowdown reasons, the power limit and the "
                         "peers, by no band of a figure: nothing to learn",
}
# The records read: a line whose record is named otherwise is passed over unparsed (`wanted`). gpuval writes a
# record's name in its first bytes (schema_version, id, run_id, kind, name); a line whose head names none is parsed.
READ = frozenset(name.encode() for name in (*PER_GPU, "gemm_sustained", "p2p_bandwidth", *NODE_ALLREDUCE,
                                            "ib_write_bw", *FACTS, "all_reduce", "test"))
_NAME = re.compile(rb'"name"\s*:\s*"([^"\\]{1,64})"')
_HEAD = 256
UNREAD_FLEET = ("fleet test records: their busbw per cycle is the better of out-of-place and in-place, not the "
                "nccl_allreduce method's mean; a fleet check's node tests are read from their health records")


@dataclass(frozen=True)
class Measure:
    """One figure as measured: the band's metric and unit, and what else makes two figures the same measurement
    (the all_reduce's size, ranks and nodes; the sustained load's seconds)."""

    metric: str
    unit: str
    size_bytes: int | None = None
    ranks: int | None = None
    seconds: float | None = None
    nodes: int = 1

    def words(self) -> str:
        """How it was measured, beyond its metric: "at 8G over 8 ranks", "" where nothing more."""
        parts = [f"at {format_size(self.size_bytes)}" if self.size_bytes else "",
                 f"over {self.ranks} ranks" if self.ranks else "", f"of {self.seconds:g} s" if self.seconds else ""]
        return " ".join(p for p in parts if p)


@dataclass
class Values:
    """One measurement's figures on one node: who each is ("GPU 3", "1<-0" a pair, "mlx5_0", "" the node) and its
    value as recorded, in two lists (a fleet's figures are pooled list by list)."""

    who: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def add(self, who: str, value: float) -> None:
        self.who.append(who)
        self.value.append(value)

    def extend(self, other: "Values") -> None:
        self.who.extend(other.who)
        self.value.extend(other.value)

    def pairs(self) -> Iterator[tuple[str, float]]:
        return zip(self.who, self.value)


@dataclass
class Seen:
    """One check's newest record on one node: when, which record and run, its figures and the fact it states."""

    at: datetime
    record_id: str
    run_id: str
    figures: dict[Measure, Values] = field(default_factory=dict)
    fact: Any = None


@dataclass
class NodeSeen:
    """What one node's newest records say: its SKU, GPU name and GPU count (the newest health record's `where`),
    and each check's newest record."""

    host: str
    at: datetime
    sku: str | None = None
    gpu_name: str | None = None
    gpus: int = 0
    checks: dict[str, Seen] = field(default_factory=dict)

    def figures(self) -> dict[Measure, Values]:
        """Every figure of the node, by measurement (a health and a bench all_reduce of one measurement both)."""
        out: dict[Measure, Values] = {}
        for seen in self.checks.values():
            for measure, values in seen.figures.items():
                out.setdefault(measure, Values()).extend(values)
        return out

    def fact(self, check: str) -> Any:
        seen = self.checks.get(check)
        return seen.fact if seen is not None else None

    def runs(self) -> dict[str, datetime]:
        """The runs whose records count, with when each began."""
        return {s.run_id: s.at for s in self.checks.values() if s.figures or s.fact is not None}


@dataclass
class MultiRun:
    """A collective run over several nodes: one figure per measurement for all its nodes together."""

    run_id: str
    at: datetime
    hosts: tuple[str, ...]
    figures: dict[Measure, float]


@dataclass
class Reading:
    """Everything read: each node's newest records, the multi-node runs, and what was left out and why."""

    nodes: dict[str, NodeSeen] = field(default_factory=dict)
    runs: dict[str, MultiRun] = field(default_factory=dict)
    records: int = 0  # records read (after --since)
    older: int = 0  # records of a node left out for a newer record of the same check
    could_not_run: Counter[str] = field(default_factory=Counter)  # ERROR records by check
    unreadable: int = 0  # lines that are no record
    unread: set[str] = field(default_factory=set)  # kinds of record read into nothing, why
    versions: Counter[str] = field(default_factory=Counter)  # gpuval versions the records name

    def add(self, record: Result) -> None:
        """Take one record in (a newer record of a node's check replaces the older)."""
        self.records += 1
        version = record.params.get("gpuval")
        if isinstance(version, str):
            self.versions[version[:40]] += 1
        if record.kind == "health" and isinstance(record.data, HealthData):
            self._health(record)
        elif record.kind == "collective" and isinstance(record.data, CollectiveData):
            self._collective(record)
        elif isinstance(record.data, FleetData) and record.data.role == "test":
            self.unread.add(UNREAD_FLEET)

    def _node(self, record: Result) -> NodeSeen:
        host = record.where.hostname
        node = self.nodes.get(host)
        if node is None:
            node = self.nodes[host] = NodeSeen(host, record.started_at)
        return node

    def _keep(self, node: NodeSeen, key: str, seen: Seen) -> None:
        old = node.checks.get(key)
        if old is not None and old.record_id == seen.record_id:
            return  # the same record again (a file read twice, a record imported twice)
        if old is not None:
            self.older += 1  # one of the two is left out: the older
            if (old.at, old.record_id) >= (seen.at, seen.record_id):
                return
        node.checks[key] = seen

    def _health(self, record: Result) -> None:
        name = record.name
        if record.status is Status.ERROR:
            self.could_not_run[name] += 1
            return
        node = self._node(record)
        if record.started_at >= node.at or node.gpu_name is None:
            node.at, node.sku, node.gpu_name, node.gpus = (record.started_at, record.where.sku,
                                                           record.where.gpu_model, record.where.gpu_count)
        seen = Seen(record.started_at, record.id, record.run_id)
        data: HealthData = record.data  # type: ignore[assignment]
        if name in FACTS:
            seen.fact = _fact(name, data)
        else:
            seen.figures = health_figures(name, data)
        if seen.figures or seen.fact is not None:
            self._keep(node, name, seen)

    def _collective(self, record: Result) -> None:
        data: CollectiveData = record.data  # type: ignore[assignment]
        if record.name != "all_reduce" or record.status is Status.ERROR:
            return
        hosts = tuple(sorted(set(data.hosts or [record.where.hostname])))
        figures = allreduce_figures(data, len(hosts), record.where.ranks)
        if not figures:
            return
        if len(hosts) > 1:
            self.runs.setdefault(record.id, MultiRun(record.run_id, record.started_at, hosts, figures))
            return
        node = self._node(record)
        seen = Seen(record.started_at, record.id, record.run_id, {m: Values([""], [v]) for m, v in figures.items()})
        self._keep(node, "bench all_reduce", seen)


def wanted(raw: bytes) -> bool:
    """Whether a line may hold a record learning reads (never a line passed over on a guess: one whose head names
    no record is read)."""
    found = _NAME.search(raw, 0, _HEAD)
    return found is None or found.group(1) in READ


def _fact(name: str, data: HealthData) -> Any:
    """What a population is, from one record: the GPU models (gpu_count), the driver version, the enforced power
    limits (power_limit: {index: [enforced, default]})."""
    details = data.details
    if name == "gpu_count":
        models = details.get("models")
        return tuple(sorted(str(m) for m in models)) if isinstance(models, list) else None
    if name == "driver":
        return str(data.value) if isinstance(data.value, str) and data.value else None
    limits = details.get("limits")
    if not isinstance(limits, dict):
        return None
    enforced = {v[0] for v in limits.values() if isinstance(v, list) and v and isinstance(v[0], (int, float))}
    return tuple(sorted(float(w) for w in enforced)) or None


_MEASURES = {name: tuple((key, Measure(metric, unit)) for key, metric, unit in rows) for name, rows in PER_GPU.items()}


def health_figures(name: str, data: HealthData) -> dict[Measure, Values]:
    """The figures a health record keeps, by measurement (empty for a check that measures no figure a band
    judges)."""
    details = data.details
    figures: dict[Measure, Values] = {}
    if name in PER_GPU:
        measures = _MEASURES[name]
        for gpu in data.per_gpu():
            who = f"GPU {gpu.index}"
            for key, measure in measures:
                if key in gpu.figures:
                    figures.setdefault(measure, Values()).add(who, gpu.figures[key])
    elif name == "gemm_sustained":
        dtype, seconds = details.get("dtype"), details.get("seconds")
        if dtype in ("bf16", "fp16") and isinstance(seconds, (int, float)):
            found = Values()
            for gpu in data.per_gpu():  # the one band judges each GPU alone and with every GPU loaded
                for phase in ("alone", "together"):
                    if phase in gpu.figures:
                        found.add(f"GPU {gpu.index} {phase}", gpu.figures[phase])
            figures[Measure(f"gemm_sustained_{dtype}_tflops", "TFLOPS", seconds=float(seconds))] = found
    elif name == "p2p_bandwidth":
        pairs = details.get("read_write_gbps")
        found = Values()
        for pair, rw in pairs.items() if isinstance(pairs, dict) else ():
            if isinstance(rw, list) and rw and _number(rw[0]):
                found.add(str(pair), float(rw[0]))
        if found.value:
            figures[Measure("p2p_read_gbps", "GB/s")] = found
    elif name in NODE_ALLREDUCE:
        size, ranks = details.get("size_bytes"), details.get("ranks")
        if _number(data.value) and isinstance(size, int) and isinstance(ranks, int):
            figures[Measure(NODE_ALLREDUCE[name], "GB/s", size, ranks)] = Values([""], [float(data.value)])
    elif name == "ib_write_bw":
        figures = _ib_write(details)
    return figures


def _ib_write(details: dict[str, Any]) -> dict[Measure, Values]:
    """Each HCA's loopback write bandwidth, where the record names its metric and message size (gpuval's records
    since it learns; an older record does not, and is another measurement for all that can be told)."""
    size, metric, per_hca = details.get("size_bytes"), details.get("metric"), details.get("bandwidth_gbps")
    if not isinstance(size, int) or metric not in ("ib_write_bw_gdr_gbps", "ib_write_bw_gbps") \
            or not isinstance(per_hca, dict):
        return {}
    found = Values()
    for hca, value in per_hca.items():
        if _number(value):
            found.add(str(hca), float(value))
    return {Measure(metric, "Gb/s", size): found} if found.value else {}


def allreduce_figures(data: CollectiveData, nodes: int, ranks: int | None) -> dict[Measure, float]:
    """An all_reduce sweep's figure at each size: the mean of out-of-place and in-place busbw (nccl-tests' Avg bus
    bandwidth at one size, what the nccl_allreduce method measures); none for a sweep whose ranks are not known."""
    if not ranks:
        return {}
    try:
        rows = rows_from_json(data.results)
    except (ValueError, TypeError, KeyError):
        return {}
    metric = allreduce_band_name(nodes)
    out = {}
    for row in rows:
        figure = allreduce_figure(row)
        if figure is not None:
            out[Measure(metric, "GB/s", row.size, ranks, nodes=nodes)] = figure
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


BadLine = Callable[[str], None]


def read_files(paths: Iterable[Path], since: datetime | None, on_bad: BadLine) -> Reading:
    """The records of JSON Lines files, line by line; a line that is no record is counted and told to `on_bad`
    ("FILE:LINE: why"), never an end to the reading."""
    reading = Reading()
    for path in paths:
        reader = JsonlReader(path, missing_ok=False)

        def bad(lineno: int, why: str, path: Path = path) -> None:
            reading.unreadable += 1
            on_bad(f"{path}:{lineno}: {why}")

        _take(reading, reader.read(final=True, on_bad=bad, wanted=wanted), since)
    return reading


def read_store(url: str | None, since: datetime | None, on_bad: BadLine, page: int = 20_000) -> Reading:
    """The records of the results store, page by page (its row order), never all at once."""
    from gpuval.results.store import open_store

    store = open_store(url)
    reading = Reading()

    def rows() -> Iterator[Result]:
        cursor = 0
        while batch := store.rows_after(cursor, page):
            for number, text in batch:
                raw = text.encode()
                if number <= cursor or not wanted(raw):
                    continue  # a row already read (PostgreSQL's overlap), or no record learning reads
                record, why = parse_line(raw)
                if record is None:
                    reading.unreadable += 1
                    on_bad(f"{store.url} row {number}: {why}")
                else:
                    yield record
            cursor = max(cursor, batch[-1][0])

    _take(reading, rows(), since)
    return reading


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Reading and learning build a few hundred thousand small objects and no reference cycle: the cyclic
    collector, run by allocation counts, would walk all of them again and again (a third of the time at 8,192
    nodes, and half of the learning's)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _take(reading: Reading, records: Iterable[Result], since: datetime | None) -> None:
    with no_cycle_collection():
        for record in records:
            if since is None or record.started_at >= since:
                reading.add(record)
