"""The health workload's run: the suite on a recording, each check's Result record built with this machine as its
`where` and the recording's SKU and GPUs, saved as the check ends, in the suite's order."""

from __future__ import annotations

from gpuval.checks.suite import ORDER
from gpuval.results import Status, read_results
from gpuval.workloads.health.run import HealthRequest, run_health
from tests.health_support import A100, no_imds  # noqa: F401


def test_every_check_becomes_one_record_saved_as_it_ends(tmp_path):
    seen = []
    req = HealthRequest("run-h", A100, results=tmp_path / "r.jsonl", repeats=1)
    run = run_health(req, on_result=lambda r: seen.append(len(read_results(tmp_path / "r.jsonl"))))
    assert [r.name for r in run.records] == [r.name for r in run.suite.results] == ORDER
    assert seen == list(range(1, len(ORDER) + 1))  # the record of each check was saved before the next one ran
    assert [r.id for r in read_results(tmp_path / "r.jsonl")] == [r.id for r in run.records]
    record = run.records[0]
    assert (record.where.sku, record.where.gpu_count, record.where.engine) == (A100, 8, "local")
    assert record.data.fault_code == "GPU_MISSING" and record.status is Status.PASS
    assert record.params["baseline"] == ["gpuval:Standard_ND96asr_v4.yaml"]
