"""Eight GPUs off Azure, on the recorded bare-metal HGX H100 8-GPU nodes (one machine's nvidia-smi -q of all eight
GPUs; the variant with an InfiniBand HCA per GPU): with no SKU, health judges the links, the fabric and each GPU's
own figures by its GPU model; GPU-to-GPU bandwidth and all_reduce only where a figure of that machine kind exists,
the packaged HGX H100/H200 8-GPU profile (baselines/profiles/). The measured figures the tests give these nodes are
published ones of the same board (nvbandwidth on an ND H100 v5, all_reduce 480.3 GB/s at 16 GiB)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import all_checks, run_suite
from gpuval.results.model import Status
from tests.health_support import context, data_set, gpu, no_imds  # noqa: F401

BARE, IB = "hgx-h100-8gpu", "hgx-h100-8gpu-ib"
PROFILE = str(resources.files("gpuval.baselines") / "profiles" / "hgx_h100_h200_8gpu.yaml")
FIGURES = {"allreduce_busbw_gbps": 480.318, "p2p_read_gbps": 370.9}  # AzNHC's health.log and nvbandwidth, ND H100 v5


def _measured(data: dict, **figures: object) -> None:
    data["measurements"] = {**FIGURES, **figures}


def _run(name: str, *checks: str, change=None, profile: bool = False) -> dict:
    ctx = context(name, change or _measured, baselines=(PROFILE,) if profile else ())
    chosen = [REGISTRY[c] for c in checks] if checks else all_checks()
    return {r.name: r for r in run_suite(ctx, chosen).results}


@pytest.mark.parametrize("name", [BARE, IB])
def test_with_no_sku_the_links_the_fabric_and_each_gpus_own_figures_are_judged(name):
    r = _run(name, change=lambda d: None)
    assert r["nvlink"].status is Status.PASS and "18 active NVLinks on each of 8 GPUs" in r["nvlink"].reason
    assert r["fabric"].status is Status.PASS and "8/8 GPUs report the fabric completed" in r["fabric"].reason
    assert r["power_limit"].status is Status.PASS and "the H100 SXM5 80GB (no SKU) board power" in r["power_limit"].reason
    for check in ("ecc", "row_remap", "pcie_link", "pcie_errors", "firmware", "gpu_mode", "app_clocks"):
        assert r[check].status is Status.PASS, r[check]
    assert not [x for x in r.values() if x.status in (Status.FAIL, Status.ERROR, Status.WARN)]
    assert (r["topology"].status, r["ib_ports"].status) == ((Status.SKIPPED, Status.SKIPPED) if name == BARE
                                                            else (Status.PASS, Status.PASS))


def test_a_link_down_or_a_fabric_not_trained_fails_with_no_sku():
    down = _run(BARE, "nvlink", change=gpu(5, nvlink_active=[True] * 17 + [False]))["nvlink"]
    assert down.status is Status.FAIL and "GPU 5" in down.reason
    fabric = _run(BARE, "fabric", change=gpu(2, fabric={"state": "not_started"}))["fabric"]
    assert fabric.status is Status.FAIL and "GPU 2 (00000000:3A:00.0): fabric not started" in fabric.reason


def test_with_no_figure_of_this_machine_kind_p2p_is_judged_only_against_its_peers_and_all_reduce_not_at_all():
    r = _run(IB, "p2p_bandwidth", "nccl_allreduce_node")
    allreduce = r["nccl_allreduce_node"]
    assert allreduce.status is Status.SKIPPED and "reported, not judged" in allreduce.reason
    p2p = r["p2p_bandwidth"]  # every pair crosses the NVSwitches: the same path, judged against the other 55
    assert p2p.status is Status.PASS and p2p.details["judged_by"] == {"band": None, "floor": None, "peers": "pass"}
    assert "band: none (no baseline for it on H100 SXM5 80GB (no SKU))" in p2p.reason
    assert p2p.value == 370.9 and allreduce.value == 480.318


def test_the_hgx_profile_judges_p2p_and_all_reduce_by_figures_of_that_board():
    r = _run(IB, "gpu_count", "p2p_bandwidth", "nccl_allreduce_node", "fabric", profile=True)
    assert all(x.status is Status.PASS for x in r.values()), r
    assert "at 16G" in r["nccl_allreduce_node"].reason and "NVIDIA/nccl-tests#212" in r["nccl_allreduce_node"].reason
    slow = _run(IB, "p2p_bandwidth", "nccl_allreduce_node", profile=True,
                change=lambda d: _measured(d, allreduce_busbw_gbps=452.0,
                                           p2p_read_gbps={"default": 370.9, "4<-6": 290.1}))
    assert slow["nccl_allreduce_node"].status is Status.WARN
    assert slow["p2p_bandwidth"].status is Status.FAIL and "GPU 4" in slow["p2p_bandwidth"].reason
    fewer = _run(BARE, "gpu_count", profile=True, change=lambda d: d["gpus"].pop())["gpu_count"]
    assert fewer.status is Status.FAIL


@pytest.mark.parametrize("name", [BARE, IB])
def test_gpuval_health_on_each_recording_passes_with_no_sku(name, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path / "data"), "GPUVAL_STATE_DIR": str(tmp_path / "state")}
    got = subprocess.run([sys.executable, "-m", "gpuval", "health", "--recorded", name], capture_output=True,
                         text=True, timeout=240, env=env)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    assert "verdict: PASS" in got.stdout and "SKU unknown" in got.stdout
