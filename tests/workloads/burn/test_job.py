"""The `burn` workload as a job: one `gpuval burn` per node printing its record, read back by the job's reader."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuval.checks.base import CheckResult
from gpuval.errors import UsageError
from gpuval.results import Status, Where
from gpuval.workloads.base import ResultContext, WorkloadRequest, get_workload
from gpuval.workloads.burn.records import burn_record
from gpuval.workloads.burn.run import parse_duration
from gpuval.workloads.health.records import health_record


def test_burn_job_runs_one_burn_per_node_and_reads_its_records():
    workload = get_workload("burn")
    spec = workload.build(WorkloadRequest(workload="burn", nodes=4, args=["--duration", "5m"]))
    assert spec.command == ["gpuval", "burn", "--results", "/dev/stdout", "--duration", "5m"]
    assert spec.nodes == 4 and spec.procs_per_node == 1
    started = datetime.now(timezone.utc)
    burn = CheckResult("burn", Status.FAIL, "GPU_BURN_FAILED", 600.0, 730.0, "TFLOPS", "GPU 4 (...) slow")
    other = CheckResult("ecc", Status.PASS, "ECC_ERRORS", 0, 0, "errors", "ok")
    lines = [burn_record(burn, Where(hostname="node-3"), "r", started).model_dump_json(),
             health_record(other, Where(hostname="node-3"), "r", started).model_dump_json()]
    ctx = ResultContext(spec=spec, engine="slurm", job_id="7", run_id="r", started=started)
    [back] = workload.read("some log line\n" + "\n".join(lines) + "\n", ctx)
    assert (back.kind, back.name, back.where.hostname, back.where.job_id) == ("health", "burn", "node-3", "7")
    with pytest.raises(UsageError):
        workload.build(WorkloadRequest(workload="burn", use="gpu-burn"))


@pytest.mark.parametrize("text, seconds", [("60", 60), ("90s", 90), ("5m", 300), ("1h", 3600), ("0.5", 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5s", "2d", "soon", "25h"])
def test_bad_durations_are_one_line_errors(text):
    with pytest.raises(UsageError, match="--duration"):
        parse_duration(text)
