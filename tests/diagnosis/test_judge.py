"""Outlier, history and baseline judgement on fleets with planted slow nodes; the baseline judged through
gpuval.baselines' one judge, the packaged ND96asr_v4 one included."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuval.baselines import Band, Baseline, baseline_source
from gpuval.diagnosis import diagnose, record_bands
from gpuval.results import Status
from gpuval.results.query import MetricPoint
from benchmarks.synthetic_fleet import SIZES, SKU, fleet_run

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)


def _points(runs):
    return [MetricPoint(r.where.hostname, r.run_id, r.started_at, r.kind, r.name, m.name, m.value, m.unit,
                        m.size_bytes) for run in runs for r in run for m in r.metrics]


def test_peer_outliers_are_found_and_only_they():
    run = fleet_run("r", 40, {"node0007": 0.80, "node0031": 0.93, "node0012": 0.97}, seed=3)
    diag = diagnose(run)
    status = {n.host: n.status for n in diag.nodes}
    assert status["node0007"] is Status.FAIL  # 20% down: beyond twice the band
    assert status["node0031"] is Status.WARN  # 7% down: beyond the 5% band
    assert status["node0012"] is Status.PASS  # 3% down: within the noise
    assert [n.host for n in diag.nodes[:2]] == ["node0007", "node0031"]
    assert sum(s is not Status.PASS for s in status.values()) == 2
    finding = next(f for f in diag.nodes[0].findings if f.check == "peers")
    assert finding.metric == "busbw" and finding.size_bytes == SIZES[-1]
    assert finding.expected > finding.value and finding.evidence["peers"] == 40
    assert "below" in finding.message and "median" in finding.message


def test_two_nodes_are_not_judged_against_each_other():
    diag = diagnose(fleet_run("r", 2, {"node0002": 0.5}))
    assert all(n.status is Status.PASS for n in diag.nodes)


def test_history_regression_beyond_own_noise():
    past = [fleet_run(f"p{i}", 5, seed=i, started=NOW - timedelta(days=5 - i)) for i in range(4)]
    # node0003 loses 10% against its own past runs: beyond its noise; node0004 loses 3%: within it.
    now = fleet_run("now", 5, {"node0003": 0.90, "node0004": 0.97}, seed=9, started=NOW)
    diag = diagnose(now, _points(past + [now]))
    by = {n.host: n for n in diag.nodes}
    history = [f for f in by["node0003"].findings if f.check == "history"]
    assert history and history[0].status is Status.WARN
    assert len(history[0].evidence["past_runs"]) == 3 and history[0].evidence["n"] == 4
    assert not [f for f in by["node0004"].findings if f.check == "history"]


def test_history_needs_three_past_runs():
    past = [fleet_run(f"p{i}", 3, seed=i, started=NOW - timedelta(days=3 - i)) for i in range(2)]
    now = fleet_run("now", 3, {"node0001": 0.5}, started=NOW)
    diag = diagnose(now, _points(past))
    assert not [f for f in diag.findings() if f.check == "history"]


def _allreduce_baseline(size: int, expected: float = 228.0, warn: float = 205.0, fail: float = 180.0) -> Baseline:
    """A baseline with only the all_reduce band (Expectation is gone: the diagnosis reads baselines' Bands)."""
    band = Band("allreduce_busbw_gbps", unit="GB/s", expected=expected, warn_below=warn, fail_below=fail,
                size_bytes=size, fail_source="azurehpc-health-checks")
    return Baseline(sku=SKU, bands={band.name: band})


def test_baseline_at_its_named_size():
    expect = _allreduce_baseline(SIZES[-1])
    run = fleet_run("r", 2, {"node0002": 0.85})
    diag = diagnose(run, baselines=lambda sku: expect if sku == SKU else None)
    base = {f.host: f for f in diag.findings() if f.check == "baseline"}
    assert base["node0001"].status is Status.PASS
    assert base["node0002"].status is Status.WARN and base["node0002"].expected == 228.0
    short = _allreduce_baseline(16 * 1024**3)
    diag = diagnose(run, baselines=lambda sku: short)
    assert {f.status for f in diag.findings()} == {Status.SKIPPED}
    assert "reached 4G: not judged" in diag.findings()[0].message


def test_failed_records_make_findings_but_errors_are_not_outliers():
    run = fleet_run("r", 5)
    run[0].status, run[0].reason = Status.ERROR, "rank 3 could not join"
    run[0].metrics[2].value = 1.0  # a broken run's figure is not compared with peers
    diag = diagnose(run)
    node = next(n for n in diag.nodes if n.host == "node0001")
    assert node.status is Status.ERROR and "could not run: rank 3 could not join" in node.summary
    assert not [f for f in diag.findings() if f.check == "peers"]


def test_packaged_ndv4_baseline_judges_the_8_gib_all_reduce():
    source = baseline_source()
    (rb,) = record_bands(source(SKU))
    assert (rb.metric, rb.name, rb.band.size_bytes, rb.ranks) == ("busbw", "all_reduce", 8 * 1024**3, 8)
    assert source("Standard_Unknown_v9") is None
    run = fleet_run("r", 3, {"node0002": 0.9})  # 30 sizes up to 4 GiB: short of the baseline's 8 GiB
    assert {f.status for f in diagnose(run, baselines=source).findings() if f.check == "baseline"} == {Status.SKIPPED}
    for record in run:  # extend each sweep to 8 GiB at its 4 GiB figure: ~232 GB/s, ~209 on node0002
        last = dict(record.data.results[-1], size=8 * 1024**3)
        record.data.results.append(last)
    verdicts = {f.host: f.status for f in diagnose(run, baselines=source).findings() if f.check == "baseline"}
    assert verdicts["node0002"] is Status.FAIL and verdicts["node0001"] is not Status.FAIL


def test_a_record_that_could_not_run_says_so_once_and_its_node_is_error():
    from gpuval.results import Result, Where

    where = Where(hostname="vm")
    records = [Result(run_id="r1", kind="health", name="nccl_allreduce_node", where=where, status=Status.ERROR,
                      reason="could not run: all_reduce at 1G measured nothing"),
               Result(run_id="r1", kind="health", name="ecc", where=where, status=Status.PASS)]
    (node,) = diagnose(records).nodes
    assert node.status is Status.ERROR  # THE node verdict: one check could not run, the rest pass
    assert node.summary == "health nccl_allreduce_node could not run: all_reduce at 1G measured nothing"
