"""Two runs side by side: what changed on each node, and whether the change is beyond the noise."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from gpuval.diagnosis.judge import Key, judged_values
from gpuval.diagnosis.stats import HIGHER_IS_BETTER, RELATIVE_FLOOR, band
from gpuval.results.model import Result
from gpuval.results.query import MetricPoint

NOISE_Z = 3.0  # a change within 3 robust sigmas of the node's (or the fleet's) noise is "same"


@dataclass
class Change:
    """One metric of one node (or of the whole run: host '*', the median over nodes) in run A and run B."""

    host: str
    kind: str
    name: str
    metric: str
    size_bytes: int | None
    unit: str
    a: float
    b: float
    change_pct: float
    noise_pct: float
    noise_from: str  # "history" (the node's past runs), "peers" (spread among nodes of run A), "floor"
    verdict: str  # "regressed", "improved", "same"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    """Every change, plus the nodes found in only one of the runs."""

    run_a: str
    run_b: str
    changes: list[Change]
    only_a: list[str]
    only_b: list[str]

    @property
    def verdict(self) -> str:
        """'regressed' if anything regressed beyond noise, else 'improved' if anything improved, else 'same'."""
        verdicts = {c.verdict for c in self.changes}
        return next((v for v in ("regressed", "improved") if v in verdicts), "same")

    def to_json(self) -> dict[str, Any]:
        return {"run_a": self.run_a, "run_b": self.run_b, "verdict": self.verdict, "only_a": self.only_a,
                "only_b": self.only_b, "changes": [c.to_json() for c in self.changes]}


def _values(records: list[Result]) -> dict[tuple[str, Key], tuple[float, str]]:
    return {(r.where.hostname, key): (value, unit) for r in records for key, value, unit in judged_values(r)}


def _relative_noise(values: list[float]) -> float | None:
    """Robust sigma relative to the median, or None when there are too few values to say."""
    if len(values) < 3:
        return None
    ref = band(values)
    return ref.sigma / abs(ref.center) if ref.center else None


def _change(host: str, key: Key, a: float, b: float, unit: str, noise: float | None, source: str) -> Change:
    pct = (b - a) / a * 100 if a else 0.0
    width = max(NOISE_Z * (noise or 0.0), RELATIVE_FLOOR) * 100
    if noise is None:
        source = "floor"
    better = pct > 0 if HIGHER_IS_BETTER[key[2]] else pct < 0
    verdict = "same" if abs(pct) <= width else ("improved" if better else "regressed")
    return Change(host, key[0], key[1], key[2], key[3], unit, a, b, round(pct, 2), round(width, 2), source, verdict)


def compare(run_a: list[Result], run_b: list[Result], history: Iterable[MetricPoint] = ()) -> Comparison:
    """Compare run B with run A node by node and as a whole; noise comes from each node's history when it has
    three past runs, else from the spread among the nodes of run A, else the 5% floor."""
    va, vb = _values(run_a), _values(run_b)
    exclude = {r.run_id for r in run_a + run_b}
    past: dict[tuple[str, tuple], list[float]] = defaultdict(list)
    for p in history:
        if p.run_id not in exclude and p.value is not None:
            past[(p.hostname, (p.kind, p.name, p.metric, p.size_bytes))].append(p.value)
    peers: dict[Key, list[float]] = defaultdict(list)
    for (_, key), (value, _) in va.items():
        peers[key].append(value)
    changes = []
    for (host, key), (a, unit) in sorted(va.items(), key=lambda kv: (kv[0][1][:4], kv[0][0])):
        if (host, key) not in vb:
            continue
        own = _relative_noise(past.get((host, key[:4]), []))
        noise, source = (own, "history") if own is not None else (_relative_noise(peers[key]), "peers")
        changes.append(_change(host, key, a, vb[(host, key)][0], unit, noise, source))
    for key, values in peers.items():
        b_values = [v for (h, k), (v, _) in vb.items() if k == key]
        if len(values) > 1 and b_values:
            unit = next(u for (h, k), (_, u) in va.items() if k == key)
            noise = _relative_noise(values)  # the median moves less than one node: its noise shrinks by sqrt(n)
            noise = noise / len(values) ** 0.5 if noise is not None else None
            changes.append(_change("*", key, statistics.median(values), statistics.median(b_values), unit, noise,
                                   "peers"))
    hosts_a = {r.where.hostname for r in run_a}
    hosts_b = {r.where.hostname for r in run_b}
    return Comparison(run_a[0].run_id if run_a else "", run_b[0].run_id if run_b else "", changes,
                      sorted(hosts_a - hosts_b), sorted(hosts_b - hosts_a))
