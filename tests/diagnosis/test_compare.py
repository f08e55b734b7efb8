"""Run comparison on fleets with a planted regression: noise from the nodes' own history, else their peers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuval.diagnosis.compare import compare
from gpuval.results.query import MetricPoint
from benchmarks.synthetic_fleet import fleet_run

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)


def _points(runs):
    return [MetricPoint(r.where.hostname, r.run_id, r.started_at, r.kind, r.name, m.name, m.value, m.unit,
                        m.size_bytes) for run in runs for r in run for m in r.metrics]


def test_compare_flags_planted_regression_not_noise():
    a = fleet_run("a", 20, seed=1)
    b = fleet_run("b", 20, {"node0005": 0.75}, seed=2)
    result = compare(a, b)
    regressed = [c for c in result.changes if c.verdict == "regressed"]
    assert [c.host for c in regressed] == ["node0005"] and result.verdict == "regressed"
    assert regressed[0].change_pct < -20
    fleet = next(c for c in result.changes if c.host == "*")
    assert fleet.verdict == "same"
    same = compare(a, fleet_run("c", 20, seed=3))
    assert same.verdict == "same"
    faster = compare(a, fleet_run("d", 19, {f"node{n:04d}": 1.2 for n in range(1, 20)}, seed=4))
    assert faster.verdict == "improved" and faster.only_a == ["node0020"]


def test_compare_uses_the_nodes_own_history_for_noise():
    past = [fleet_run(f"p{i}", 4, seed=10 + i, started=NOW - timedelta(days=9 - i)) for i in range(5)]
    a, b = fleet_run("a", 4, seed=1), fleet_run("b", 4, seed=2)
    result = compare(a, b, _points(past))
    assert {c.noise_from for c in result.changes if c.host != "*"} == {"history"}
