"""A floor where nothing else can judge (Baseline.judge_floor): a figure under half of what its GPU can physically
do (the datasheet peak of its model, the rate of its PCIe link) fails, on one GPU or the first node of a model, with
no band; every healthy figure recorded reads 65-91% of its peak, so the floor never fails a healthy GPU."""

from __future__ import annotations

import pytest

from gpuval.baselines import GpuIdentity, with_gpus
from gpuval.baselines.gpu_models import PEAK_OF, gpu_models
from gpuval.checks.base import REGISTRY, identity_of
from gpuval.checks.suite import run_suite
from gpuval.node.recorded import RecordedMachine
from gpuval.results.model import Status
from tests.health_support import A100, context, no_imds  # noqa: F401

# The recordings of healthy nodes (src/gpuval/node/recorded; h200-vm-busy is the same GPU shared with another job)
HEALTHY = ("Standard_ND96asr_v4", "Standard_ND96isr_H100_v5", "h200-vm")
A100_40, A100_80, H100, H200, V100 = 0x20B0, 0x20B2, 0x2330, 0x2335, 0x1DB5
# Healthy figures the docs cite beside the recordings, each with its source
CITED = [
    (H200, "gemm_bf16_tflops", 772.0, "gpuval's H200 run, 2026-11-26: the lowest bf16 burst"),
    (H200, "gemm_fp16_tflops", 757.0, "the same run: the lowest fp16 burst"),
    (H200, "hbm_memcpy_gbps", 4201.0, "the same run: the lowest memcpy"),
    (H200, "hbm_triad_gbps", 4356.0, "the same run: the lowest triad"),
    (H200, "d2h_gbps", 55.3, "the same run: D2H at Gen5 x16"),
    (H100, "h2d_gbps", 48.0, "AzNHC conf/nd96isr_h100_v5.conf check_gpu_bw 48: the published minimum at Gen5 x16"),
    (H100, "gemm_bf16_tflops", 792.1, "MAMF finder: the best torch matmul measured on an H100 SXM"),
    (A100_40, "gemm_bf16_tflops", 267.9, "MAMF finder: the best torch matmul measured on an A100 SXM"),
    (A100_80, "hbm_memcpy_gbps", 1371.0, "superbench NDmv4 baseline: bandwidthTest device-to-device"),
    (A100_80, "hbm_triad_gbps", 1700.0, "BabelStream triad on an A100 80GB (the figure the model once used)"),
    (V100, "gemm_fp16_tflops", 97.4, "zzc0721/torch-performance-test-data#140: torch.mm 8192^3 fp16 on a V100"),
    (V100, "hbm_memcpy_gbps", 730.9, "superbench bandwidthTest device-to-device on a V100 PCIe (the same 900 GB/s)"),
]


def _recorded_figures() -> list[tuple[str, str, float]]:
    """(recording, metric, figure) of every figure a healthy recording holds that a peak bounds."""
    out = []
    for name in HEALTHY:
        for metric, value in RecordedMachine.load(name).measurements.items():
            if metric in PEAK_OF or metric in ("h2d_gbps", "d2h_gbps"):
                out += [(name, metric, float(v)) for v in (value if isinstance(value, list) else [value])]
    return out


@pytest.mark.parametrize("name, metric, value", _recorded_figures())
def test_every_recorded_healthy_figure_is_over_the_floor(name: str, metric: str, value: float):
    machine = RecordedMachine.load(name)
    limits = with_gpus(None, [identity_of(machine.gpu_inventory().gpus[0])])
    judged = limits.judge_floor(metric, value)
    assert judged.status is Status.PASS, judged.reason
    assert 0.65 <= value / limits.gpu.peaks[metric].value <= 0.95, judged.reason  # healthy: 65-91% of the peak


@pytest.mark.parametrize("device, metric, value, source", CITED, ids=[f"{m}-{v:g}" for _, m, v, _ in CITED])
def test_every_healthy_figure_the_docs_cite_is_over_the_floor(device: int, metric: str, value: float, source: str):
    limits = with_gpus(None, [GpuIdentity("", device, None, None, 5 if device in (H100, H200) else 4, 16, True)])
    judged = limits.judge_floor(metric, value)
    assert judged.status is Status.PASS and 0.65 <= value / limits.gpu.peaks[metric].value <= 0.95, (source, judged)


def test_eight_a100s_at_120_tflops_fail_by_the_floor_with_no_band(tmp_path):
    """No band judges an A100's GEMM and every GPU is alike (the peers pass them): the floor, 156 TFLOPS (half the
    A100's 312 dense, NVIDIA's datasheet), fails each, named; the healthy recorded figures still pass."""
    def slow(data):
        data["sku"] = None  # no SKU, no learned band: the GPU model alone
        data["measurements"].update(gemm_fp16_tflops=120.0, gemm_bf16_tflops=120.0)
    [result] = run_suite(context(A100, slow), [REGISTRY["gemm_tflops"]]).results
    assert result.status is Status.FAIL and result.details["judged_by"] == {"band": None, "floor": "fail",
                                                                           "peers": "pass"}
    assert ("GPU 0 (00000001:00:00.0) bf16: 120 TFLOPS is 38.5% of its peak 312 TFLOPS (NVIDIA A100 Tensor Core GPU "
            "datasheet): under the floor 156 TFLOPS (gpuval policy: half the peak") in result.reason
    [healthy] = run_suite(context(A100), [REGISTRY["gemm_tflops"]]).results
    assert healthy.status is Status.PASS and healthy.details["judged_by"]["floor"] == "pass"


def test_each_peak_names_its_source_and_the_host_link_floor_follows_the_link():
    """Every model with a peak names its datasheet; H2D/D2H alone are bounded by the PCIe link's rate, scaled by the
    lanes it trained at; a host link over NVLink-C2C (GB200) and copies of every GPU at once (a shared link by
    design) have none."""
    peaked = {m.key for m in gpu_models() if m.peaks}
    assert {"a100_sxm4_40gb", "a100_sxm4_80gb", "h100_sxm5", "h100_pcie", "h100_nvl", "h200_sxm", "b200", "gb200",
            "v100_sxm2_32gb"} <= peaked
    for model in gpu_models():
        assert all(("datasheet" in p.source or "specifications" in p.source) for p in model.peaks.values()), model.key
    gen4 = with_gpus(None, [GpuIdentity("", A100_40, None, None, 4, 16, True)])
    narrow = with_gpus(None, [GpuIdentity("", A100_40, None, None, 4, 8, True)])
    assert gen4.gpu.peaks["h2d_gbps"].value == 31.5 and narrow.gpu.peaks["d2h_gbps"].value == 15.75
    assert "PCI-SIG" in gen4.gpu.peaks["h2d_gbps"].source and "h2d_all_gbps" not in gen4.gpu.peaks
    gb200 = with_gpus(None, [GpuIdentity("NVIDIA GB200", 0x2941, None, None, 5, 16, True)])
    assert "h2d_gbps" not in gb200.gpu.peaks and gb200.gpu.peaks["gemm_bf16_tflops"].value == 2500
    assert "gemm_bf16_tflops" not in with_gpus(None, [GpuIdentity("", V100, None, None, 3, 16, True)]).gpu.peaks
