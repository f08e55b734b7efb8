"""The diagnosis judges a node against its SKU's packaged baseline (gpuval.checks.baselines, from the health
checks' data files)."""

from __future__ import annotations

import pytest

from benchmarks.fleet import SKU, fleet_run
from gpuval.diagnosis import diagnose
from gpuval.diagnosis.baselines import default_expectations
from gpuval.results import Status


def test_packaged_ndv4_baseline_judges_the_8_gib_all_reduce():
    pytest.importorskip("gpuval.checks.baselines", reason="the SKU baselines (health checks) are not installed")
    source = default_expectations()
    (exp,) = source(SKU)
    assert (exp.metric, exp.name, exp.size_bytes, exp.ranks) == ("busbw", "all_reduce", 8 * 1024**3, 8)
    assert source("Standard_Unknown_v9") == []
    run = fleet_run("r", 3, {"node0002": 0.9})  # 30 sizes up to 4 GiB: short of the baseline's 8 GiB
    assert {f.status for f in diagnose(run, expectations=source).findings() if f.check == "baseline"} == {Status.SKIPPED}
    for record in run:  # extend each sweep to 8 GiB at its 4 GiB figure: ~232 GB/s, ~209 on node0002
        last = dict(record.data["results"][-1], size=8 * 1024**3)
        record.data["results"].append(last)
    verdicts = {f.host: f.status for f in diagnose(run, expectations=source).findings() if f.check == "baseline"}
    assert verdicts["node0002"] is Status.FAIL and verdicts["node0001"] is not Status.FAIL
