"""The diagnosis judges a node against its SKU's packaged baseline (gpuval.baselines, the data files the health
checks judge with too)."""

from __future__ import annotations

from benchmarks.fleet import SKU, fleet_run
from gpuval.baselines import baseline_source
from gpuval.diagnosis import diagnose, record_bands
from gpuval.results import Status


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
