"""The diagnosis of one run: every node judged four ways, each finding with its evidence.

1. its own records: a check that failed or could not run says so itself;
2. its SKU's baseline, at the size the baseline names;
3. its own history: a regression beyond the noise its past runs show;
4. its peers in the run: an outlier by median and MAD.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from gpuval.baselines import Band, Baseline, BaselineSource, allreduce_figure, allreduce_size, no_baselines
from gpuval.collectives.nccltests_parse import rows_from_json
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Row
from gpuval.diagnosis.stats import HIGHER_IS_BETTER, NoiseBand, band
from gpuval.results.data import CollectiveData
from gpuval.results.model import Result, Status, severity, worst_status
from gpuval.results.verdict import node_verdict
from gpuval.results.query import MetricPoint

MIN_PEERS = 3  # a median of two is no majority
MIN_HISTORY = 3  # past runs needed before a node's own noise is known
HISTORY_DEPTH = 10  # the most recent past runs a node is judged against

_BY_SEVERITY = {0: Status.PASS, 1: Status.WARN, 2: Status.FAIL}

# What a comparison is made over: same test, same metric, same size, same number of ranks.
Key = tuple[str, str, str, int | None, int | None]


@dataclass
class Finding:
    """One judgement about one node, with the evidence a person needs to believe it."""

    host: str
    run_id: str
    check: str  # "record", "baseline", "history", "peers"
    kind: str
    name: str
    metric: str
    status: Status
    message: str
    value: float | None = None
    expected: float | None = None
    unit: str = ""
    size_bytes: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status.value}


@dataclass
class NodeVerdict:
    """A node's verdict: THE node verdict of its records (results.verdict.node_verdict) with the findings of its
    baseline, history and peers added to it. A node where nothing was judged is SKIPPED with the reasons
    (`not_judged`), never PASS."""

    host: str
    sku: str | None
    status: Status
    findings: list[Finding]
    records: int
    not_judged: list[str] = field(default_factory=list)  # why a record or a baseline could not judge this node

    @property
    def summary(self) -> str:
        """The most severe finding's message; what was not judged; or that all is well."""
        bad = [f for f in self.findings if f.status not in (Status.PASS, Status.SKIPPED)]
        if bad:
            return bad[0].message
        if self.status is Status.SKIPPED:
            return "not judged: " + (self.not_judged[0] if self.not_judged else "no record of this node says anything")
        if self.not_judged:
            return f"all judged checks within expectations ({self.not_judged[0]})"
        return "all checks within expectations"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "sku": self.sku, "status": self.status.value, "summary": self.summary,
                "records": self.records, "not_judged": self.not_judged,
                "findings": [f.to_json() for f in self.findings]}


@dataclass
class Diagnosis:
    """Every node of a run, worst first."""

    run_id: str
    nodes: list[NodeVerdict]

    @property
    def status(self) -> Status:
        return worst_status(n.status for n in self.nodes)

    def findings(self) -> list[Finding]:
        return [f for n in self.nodes for f in n.findings]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status.value, "nodes": [n.to_json() for n in self.nodes]}


def key_of(record: Result, metric: str, size_bytes: int | None) -> Key:
    """What a value of this record is compared over."""
    return (record.kind, record.name, metric, size_bytes, record.where.ranks)


def judged_values(record: Result) -> list[tuple[Key, float, str]]:
    """The record's metrics that are compared with peers and history: (key, value, unit)."""
    if record.status in (Status.ERROR, Status.SKIPPED):
        return []  # a run that could not finish says nothing about speed
    return [(key_of(record, m.name, m.size_bytes), m.value, m.unit) for m in record.metrics
            if m.name in HIGHER_IS_BETTER and m.value is not None]


def _record_findings(record: Result) -> list[Finding]:
    if record.status in (Status.PASS, Status.SKIPPED):
        return []
    what = "could not run" if record.status is Status.ERROR else record.status.value
    why = record.reason.removeprefix(f"{what}: ") or "no reason given"  # a check's own "could not run: ..." once
    return [Finding(record.where.hostname, record.run_id, "record", record.kind, record.name, "", record.status,
                    f"{record.kind} {record.name} {what}: {why}")]


# Which baseline bands judge which records: collective all_reduce sweeps, by THE all_reduce rule
# (Baseline.allreduce_band: the record's nodes, one rank per GPU of each), on their busbw at the band's size.
UNKNOWN = "unknown"  # the name of a collective record whose log named no collective and proved none


@dataclass(frozen=True)
class RecordBand:
    """A baseline band as it applies to Result records: the kind, test and metric it judges, over how many ranks,
    at which size (the band's, else the all_reduce default: baselines.allreduce_size)."""

    kind: str
    name: str
    metric: str
    band: Band
    ranks: int | None
    size_bytes: int


def _nodes(record: Result) -> int:
    """The nodes a collective record ran on: its distinct hosts (one where it lists none: its own host)."""
    return len(set(record.data.hosts)) if isinstance(record.data, CollectiveData) and record.data.hosts else 1


def _all_reduce(baseline: Baseline, nodes: int, ranks: int | None) -> RecordBand | None:
    band = baseline.allreduce_band(nodes, ranks)
    return RecordBand("collective", "all_reduce", "busbw", band, ranks, allreduce_size(baseline, nodes, ranks)) \
        if band is not None else None


def record_band(record: Result, baseline: Baseline | None) -> RecordBand | None:
    """The band that judges this record (an all_reduce over its nodes and ranks), or None; a record whose log
    named no collective gets the all_reduce band, to say why it is not judged against it."""
    if baseline is None or record.kind != "collective" or record.name not in ("all_reduce", UNKNOWN):
        return None
    return _all_reduce(baseline, _nodes(record), record.where.ranks)


def record_bands(baseline: Baseline | None) -> list[RecordBand]:
    """The bands of a baseline that judge one node's records (the report draws them): its all_reduce over one
    rank per GPU."""
    found = _all_reduce(baseline, 1, baseline.gpus) if baseline is not None else None
    return [found] if found is not None else []


def sweep_rows(record: Result) -> list[Row]:
    """The rows of a stored collective sweep (none for other kinds)."""
    return rows_from_json(record.data.results) if isinstance(record.data, CollectiveData) else []


def _sweep_value(record: Result, size: int) -> float | None:
    """The figure a band judges of a collective sweep at exactly `size` bytes (allreduce_figure: the mean of its
    out-of-place and in-place busbw, as measured)."""
    row = next((r for r in sweep_rows(record) if r.size == size), None)
    return allreduce_figure(row) if row is not None else None


def _baseline_finding(record: Result, rb: RecordBand, sku: str | None) -> Finding:
    band, size = rb.band, rb.size_bytes
    found = Finding(record.where.hostname, record.run_id, "baseline", record.kind, record.name, rb.metric,
                    Status.SKIPPED, "", expected=band.expected, unit=band.unit, size_bytes=size,
                    evidence={k: v for k, v in (("warn_below", band.warn_below), ("fail_below", band.fail_below),
                                                ("source", band.fail_source or band.expected_source), ("sku", sku))
                              if v is not None})
    at = f" at {format_size(size)}"
    if record.name == UNKNOWN:
        found.message = (f"not judged against the {sku} baseline{at}: the log names no collective and its table "
                         "does not prove one (nccl-tests before 2.17.4 prints no name)")
        return found
    value = _sweep_value(record, size)
    if value is None:
        sizes = [r.size for r in sweep_rows(record)]
        largest = format_size(max(sizes)) if sizes else "nothing"
        found.message = (f"{record.name}: the baseline is at {format_size(size)} and the sweep reached {largest}: "
                         "not judged against it")
        return found
    judged = band.judge(value)  # THE threshold judge, on the figure as measured
    found.status, found.value = judged.status, value
    found.message = f"{record.name} {rb.metric}{at} on {sku}: {judged.reason}"
    return found


def _baseline_findings(record: Result, baseline: Baseline | None) -> list[Finding]:
    if record.status is Status.ERROR:
        return []  # a run that could not finish is not measured against anything
    rb = record_band(record, baseline)
    return [_baseline_finding(record, rb, record.where.sku)] if rb is not None else []


def _deviation_finding(record: Result, key: Key, value: float, unit: str, ref: NoiseBand, check: str,
                       evidence: dict[str, Any]) -> Finding | None:
    higher = HIGHER_IS_BETTER[key[2]]
    level = ref.severity(value, higher)
    if level == 0:
        return None
    change = (value - ref.center) / ref.center * 100 if ref.center else 0.0
    what = "of the run's median" if check == "peers" else "of its own median over past runs"
    message = (f"{record.name} {key[2]} {value:.4g} {unit} is {abs(change):.1f}% "
               f"{'below' if change < 0 else 'above'} {ref.center:.4g} {what} (noise band +-{ref.width:.3g} {unit})")
    return Finding(record.where.hostname, record.run_id, check, record.kind, record.name, key[2],
                   _BY_SEVERITY[level], message, value=value, expected=ref.center, unit=unit,
                   size_bytes=key[3], evidence={"band": ref.width, "sigma": ref.sigma, "n": ref.n,
                                                "change_pct": round(change, 2), **evidence})


def _peer_findings(records: list[Result]) -> list[Finding]:
    groups: dict[Key, list[tuple[Result, float, str]]] = defaultdict(list)
    for record in records:
        for key, value, unit in judged_values(record):
            groups[key].append((record, value, unit))
    found = []
    for key, members in groups.items():
        if len({r.where.hostname for r, _, _ in members}) < MIN_PEERS:
            continue
        ref = band([v for _, v, _ in members])
        for record, value, unit in members:
            finding = _deviation_finding(record, key, value, unit, ref, "peers",
                                         {"peers": len(members), "median": ref.center})
            if finding:
                found.append(finding)
    return found


def _history_findings(records: list[Result], history: Iterable[MetricPoint]) -> list[Finding]:
    run_ids = {r.run_id for r in records}
    past: dict[tuple[str, Key], list[MetricPoint]] = defaultdict(list)
    for p in history:
        if p.run_id in run_ids or p.value is None:
            continue
        past[(p.hostname, (p.kind, p.name, p.metric, p.size_bytes, None))].append(p)
    found = []
    for record in records:
        for key, value, unit in judged_values(record):
            points = past.get((record.where.hostname, key[:4] + (None,)), [])
            points = sorted(points, key=lambda p: p.started_at)[-HISTORY_DEPTH:]
            if len({p.run_id for p in points}) < MIN_HISTORY:
                continue
            ref = band([p.value for p in points if p.value is not None])
            finding = _deviation_finding(record, key, value, unit, ref, "history",
                                         {"past_runs": sorted({p.run_id for p in points})[-3:],
                                          "since": points[0].started_at.isoformat()})
            if finding:
                found.append(finding)
    return found


def counts_for_node(record: Result) -> bool:
    """Whether a record is judged as its node's own: every record but a fleet check's tests, links, uplinks and
    groups. Those are the evidence behind the fleet's per-node verdict records (name "node"), which count; a pair
    test's failure stored with both of its nodes must not convict the partner the fleet cleared."""
    return record.kind != "fleet" or record.name == "node"


def diagnose(records: list[Result], history: Iterable[MetricPoint] = (),
             baselines: BaselineSource = no_baselines) -> Diagnosis:
    """Judge every node of a run (its records) against baseline, history and peers; nodes worst first.

    `history` holds metric points of earlier runs (points of this run are ignored); history is matched by test,
    metric and size, not by rank count, since a node's past runs are its own. A fleet check's evidence records
    are left to its own verdicts (counts_for_node)."""
    run_id = records[0].run_id if records else ""
    records = [r for r in records if counts_for_node(r)]
    by_host: dict[str, list[Result]] = defaultdict(list)
    for record in records:
        by_host[record.where.hostname].append(record)
    findings: dict[str, list[Finding]] = defaultdict(list)
    for record in records:
        findings[record.where.hostname] += _record_findings(record)
        findings[record.where.hostname] += _baseline_findings(record, baselines(record.where.sku))
    for finding in _history_findings(records, history) + _peer_findings(records):
        findings[finding.host].append(finding)
    nodes = []
    for host, own in by_host.items():
        judged = sorted(findings[host], key=lambda f: severity(f.status), reverse=True)
        status = worst_status([node_verdict(own).status, *(f.status for f in judged)])
        skus = sorted({r.where.sku for r in own if r.where.sku})
        notes = [f.message for f in judged if f.status is Status.SKIPPED]
        if status is Status.SKIPPED:
            notes += [f"{r.kind} {r.name}: {r.reason}" for r in own if r.status is Status.SKIPPED and r.reason]
        nodes.append(NodeVerdict(host, skus[0] if skus else None, status, judged, len(own), notes))
    nodes.sort(key=lambda n: (-severity(n.status), n.host))
    return Diagnosis(run_id, nodes)
