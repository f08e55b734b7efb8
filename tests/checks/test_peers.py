"""Each GPU against its peers in the node (gpuval.checks.peers), on the recorded real nodes with per-GPU figures:
a recording gives each figure as one number for every GPU or a list by NVML index, as RecordedMeasurer reads it
(NVML and CUDA cannot run here: the recordings of published nvidia-smi, topology and benchmark output are the most
real stand-in). The slow GPU is named by NVML index and bus id, with how far under its peers and who they are."""

from __future__ import annotations

import copy
import json
import math

import pytest
import yaml

from gpuval.checks.base import REGISTRY
from gpuval.checks.peers import Figure, against_peers
from gpuval.checks.suite import run_suite
from gpuval.node.recorded import recorded_data
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.health_support import A100, H100, context, no_imds  # noqa: F401

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}
GPU3 = "GPU 3 (00000004:00:00.0)"
# The recorded ND96asr_v4's published figures (superbench v0.4.0's NDv4 baseline): every GPU at these
FP16, MEMCPY = 275.0, 1155.6


def _per_gpu(data: dict, key: str, index: int, value: float) -> None:
    """One figure as a list by NVML index: GPU `index` at `value`, the others at the recorded figure."""
    recorded = data["measurements"][key]
    data["measurements"][key] = [value if i == index else recorded for i in range(len(data["gpus"]))]


def _run(sku: str, *checks: str, change=None) -> dict:
    return {r.name: r for r in run_suite(context(sku, change), [REGISTRY[c] for c in checks]).results}


def test_one_a100_of_eight_at_60_pct_gemm_and_55_pct_hbm_fails_naming_it(tmp_path):
    """The issue's first case, end to end: `gpuval health` on the packaged ND96asr_v4 recording whose GPU 3
    computes at 60% and copies at 55% of its seven siblings (no band of gpuval's own judges an A100's GEMM or HBM:
    before, both were SKIPPED and the node passed). Exit 1, GPU 3 named by index and bus id, its peers named."""
    data = copy.deepcopy(recorded_data(A100))
    _per_gpu(data, "gemm_fp16_tflops", 3, 0.60 * FP16)
    _per_gpu(data, "hbm_memcpy_gbps", 3, 0.55 * MEMCPY)
    node = tmp_path / "ndv4-gpu3-slow.yaml"
    node.write_text(yaml.safe_dump(data))
    proc = run_gpuval("health", "--recorded", str(node), "--json", env=NO_IMDS)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    gemm, hbm = rows["gemm_tflops"], rows["hbm_bandwidth"]
    assert gemm["status"] == "fail" and hbm["status"] == "fail"
    assert (f"{GPU3} fp16: 165 TFLOPS, 40.0% under the median 275 TFLOPS of its peers (GPU 0, 1, 2, 4, 5, 6, 7"
            in gemm["reason"])
    assert gemm["data"]["details"]["judged_by"] == {"band": None, "floor": "pass", "peers": "fail"}
    # 635.58 GB/s is 45% under its peers and 40.9% of the A100 40GB's 1555 GB/s: both judges fail it, each said
    assert f"{GPU3} memcpy: 635.58 GB/s, 45.0% under the median 1155.6 GB/s of its peers" in hbm["reason"]
    assert f"{GPU3} memcpy: 635.58 GB/s is 40.9% of its peak 1555 GB/s" in hbm["reason"]
    assert hbm["data"]["details"]["judged_by"] == {"band": None, "floor": "fail", "peers": "fail"}
    assert gemm["reason"].count("% under the median") == hbm["reason"].count("% under the median") == 1  # GPU 3 only
    row = next(r for r in gemm["data"]["details"]["gpus"] if r["index"] == 3)  # kept per GPU, for a fleet to learn
    assert row == {"index": 3, "bus_id": "00000004:00:00.0", "gpu": GPU3, "fp16": 165.0}


def test_a_gpu_1_pct_slower_on_a_tight_node_passes_and_10_pct_warns():
    """The floor in percent: identical GPUs (robust sigma 0) do not fail a GPU 1% slower; 10-20% under warns."""
    for factor, status in ((0.99, Status.PASS), (0.85, Status.WARN), (0.79, Status.FAIL)):
        r = _run(A100, "gemm_tflops", change=lambda d, f=factor: _per_gpu(d, "gemm_fp16_tflops", 5, f * FP16))
        assert r["gemm_tflops"].status is status, (factor, r["gemm_tflops"].reason)


def test_the_real_nvbandwidth_pairs_pass_their_peers_and_the_real_failing_pair_fails_them_with_no_band():
    """The 56 pairs of a real ND96isr_H100_v5 (nvbandwidth, 370.26-372.96 GB/s: within 0.7%) on the bare-metal HGX
    H100 recording with no SKU (no P2P band): every pair passes its peers; AzNHC's real failure (GPU 1 <- GPU 0 at
    162.45 GB/s) fails by its peers alone, named."""
    pairs = recorded_data(H100)["measurements"]["p2p_read_gbps"]

    def measured(slow: float | None):
        def apply(data):
            data["measurements"] = {"p2p_read_gbps": {**pairs, **({"1<-0": slow} if slow else {})}}
        return apply

    healthy = _run("hgx-h100-8gpu", "p2p_bandwidth", change=measured(None))["p2p_bandwidth"]
    assert healthy.status is Status.PASS and healthy.details["judged_by"]["peers"] == "pass"
    slow = _run("hgx-h100-8gpu", "p2p_bandwidth", change=measured(162.45))["p2p_bandwidth"]
    assert slow.status is Status.FAIL and slow.details["judged_by"] == {"band": None, "floor": None, "peers": "fail"}
    assert slow.reason.startswith("GPU 1 (00000000:2A:00.0) <- GPU 0 (00000000:18:00.0) read: 162.45 GB/s, 56.2% "
                                  "under the median 370.9 GB/s of its peers (the 55 other pairs"), slow.reason


def test_pairs_of_different_paths_are_not_judged_against_each_other():
    """A V100 cube mesh (pairs of two, one or no NVLinks) or a PCIe board: no pair is another's peer."""
    def v100(data):
        data["gpu_defaults"].update(pci_device_id=0x1DB510DE, pci_subsystem_id=None, name="Tesla V100-SXM2-32GB")
    r = _run(H100, "p2p_bandwidth", change=v100)["p2p_bandwidth"]
    assert "peers: GPU pairs over different paths by design" in r.reason
    assert r.details["judged_by"]["peers"].startswith("GPU pairs over different paths")


def test_one_gpu_or_mixed_models_are_not_judged_against_peers():
    """Never a PASS by peers where there are none: one GPU (the real H200 VM) says so; a node of A100s and one H100
    says so too, and a slow A100 there is not failed by GPUs of another model."""
    one = _run("h200-vm", "gemm_tflops", "hbm_bandwidth", "h2d_d2h_bandwidth", "gemm_sustained", "clocks_under_load")
    for name in ("gemm_tflops", "hbm_bandwidth", "h2d_d2h_bandwidth"):
        assert one[name].status is Status.PASS and "peers: one GPU: not judged against peers" in one[name].reason
        assert one[name].details["judged_by"]["peers"] == "one GPU: not judged against peers"
    assert "one GPU: no spread, not judged against peers" in one["gemm_sustained"].reason
    assert "one GPU: not judged against peers" in one["clocks_under_load"].reason

    def mixed(data):
        data["gpus"][7].update(pci_device_id=0x233010DE, pci_subsystem_id=0x16C110DE, name="NVIDIA H100 80GB HBM3")
        data["measurements"]["gemm_fp16_tflops"] = [FP16] * 3 + [0.6 * FP16] + [FP16] * 3 + [740.0]
    r = _run(A100, "gemm_tflops", change=mixed)["gemm_tflops"]
    words = "GPUs of different models (A100 SXM4 40GB, H100 SXM5 80GB): not judged against peers"
    assert r.status is Status.PASS and f"peers: {words}" in r.reason  # each GPU still over its own model's floor
    assert r.details["judged_by"] == {"band": None, "floor": "pass", "peers": words}


def test_a_figure_that_is_no_finite_number_judges_nothing_and_is_nobodys_peer():
    """GPU 2's NaN is an error naming it (never a pass); GPU 3 at 60% is still failed against the six finite peers."""
    def nan_and_slow(data):
        data["measurements"]["gemm_fp16_tflops"] = [FP16, FP16, math.nan, 0.6 * FP16] + [FP16] * 4
    r = _run(A100, "gemm_tflops", change=nan_and_slow)["gemm_tflops"]
    assert r.status is Status.FAIL and "of its peers (GPU 0, 1, 4, 5, 6, 7;" in r.reason  # GPU 2 is no peer

    def inf_only(data):
        data["measurements"]["hbm_memcpy_gbps"] = [MEMCPY] * 7 + [math.inf]
    r = _run(A100, "hbm_bandwidth", change=inf_only)["hbm_bandwidth"]
    assert r.status is Status.ERROR and "GPU 7 (0000000E:00:00.0) memcpy: inf is not a finite figure: not judged" \
        in r.reason
    found, why = against_peers(context(A100), [Figure("GPU 0", 0, math.nan), Figure("GPU 1", 1, 100.0)], "x", "u")
    assert (found, why) == ([], "one GPU: not judged against peers")


@pytest.mark.parametrize("key, value, check, words", [
    # all at once, two GPUs share each PCIe switch: the band (10.5 derived) only warns at 10.2, the peers fail it
    ("h2d_all_gbps", 10.2, "h2d_d2h_bandwidth", f"{GPU3} H2D with every GPU copying: 10.2 GB/s, 21.2% under"),
    ("gemm_sustained_bf16_tflops", 200.0, "gemm_sustained", f"{GPU3} alone: 200 TFLOPS, 24.8% under the median"),
    ("load_sm_mhz", 1000.0, "clocks_under_load", f"{GPU3} alone SM clock median: 1000 MHz, 29.1% under"),
    ("load_power_w", 260.0, "clocks_under_load", f"{GPU3} alone peak power (% of its limit): 65 %, 30.1% under"),
])
def test_every_per_gpu_figure_is_judged_against_its_peers(key, value, check, words):
    def slow(data):
        data["measurements"].update(h2d_all_gbps=12.95, d2h_all_gbps=12.95, load_sm_mhz=1410.0, load_power_w=372.0)
        _per_gpu(data, key, 3, value)
    r = _run(A100, check, change=slow)[check]
    assert r.status is Status.FAIL and words in r.reason, r.reason
