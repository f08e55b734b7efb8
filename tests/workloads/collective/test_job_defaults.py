"""The nccl workload's defaults follow the job's devices as `gpuval validate`'s do (a CPU-only job
once swept to 8 GiB, tens of minutes on gloo), and its flag table carries -z; gather and scatter are reachable."""

from __future__ import annotations

import pytest

from gpuval.workloads.base import WorkloadRequest
from gpuval.workloads.collective.job import build, parse_args


@pytest.mark.parametrize("gpus, sku, top", [(0, None, "64M"), (8, None, "1G"), (8, "Standard_ND96asr_v4", "8G"),
                                            (0, "Standard_ND96asr_v4", "64M")])
def test_default_sweep_follows_the_job_devices(gpus, sku, top):
    spec = build(WorkloadRequest(workload="nccl", gpus_per_node=gpus, sku=sku, run_id="r"))
    assert spec.command == ["gpuval", "bench", "all_reduce", "-b", "8", "-e", top, "-f", "2"]


def test_blocking_and_gather_scatter_reach_the_job():
    spec = build(WorkloadRequest(workload="nccl", args=["gather", "-z", "1", "-b", "1K", "-e", "1M"], run_id="r"))
    assert spec.command[:3] == ["gpuval", "bench", "gather"] and spec.command[-2:] == ["-z", "1"]
    assert parse_args(["scatter", "-r", "1"]).collective == "scatter"
    tests = build(WorkloadRequest(workload="nccl", use="nccl-tests", args=["all_reduce", "-z", "2"], run_id="r"))
    assert tests.command[0] == "all_reduce_perf" and "-z" in tests.command
