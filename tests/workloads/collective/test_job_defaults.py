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


@pytest.mark.parametrize("nodes, procs, top", [(1, None, "8G"), (2, None, "8G"), (1, 4, "1G"), (3, None, "8G")])
def test_default_sweep_asks_the_one_all_reduce_rule(nodes, procs, top):
    """The band of the job's nodes and ranks (Baseline.allreduce_band): ND96asr_v4's 1-node and 2-node figures are
    at 8 GiB, the multi-node one too; 4 of 8 GPUs per node is no band's measurement (1 GiB, the default)."""
    spec = build(WorkloadRequest(workload="nccl", nodes=nodes, gpus_per_node=8, procs_per_node=procs,
                                 sku="Standard_ND96asr_v4", run_id="r"))
    assert spec.command[spec.command.index("-e") + 1] == top


def test_the_users_files_size_the_sweep_and_reach_health_and_burn_jobs(tmp_path):
    """--profile on `gpuval submit`: the nccl sweep stops at the profile's band; health and burn on the nodes
    judge by the same file (passed as --baseline)."""
    import yaml

    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump({"profile": "mine", "metrics": {
        "gpu_count": {"expected": 4, "expected_source": "ours", "fail_below": 4, "fail_source": "a missing GPU"},
        "allreduce_busbw_gbps": {"unit": "GB/s", "size_bytes": 4 * 1024**3, "expected": 100,
                                 "expected_source": "our run"}}}))
    req = dict(gpus_per_node=4, baselines=[str(profile)], run_id="r")
    nccl = build(WorkloadRequest(workload="nccl", **req))
    assert nccl.command[nccl.command.index("-e") + 1] == "4G"
    from gpuval.workloads.base import get_workload

    for name in ("health", "burn"):
        spec = get_workload(name).build(WorkloadRequest(workload=name, args=["--json"], **req))
        assert spec.command[-3:] == ["--baseline", str(profile), "--json"], spec.command
