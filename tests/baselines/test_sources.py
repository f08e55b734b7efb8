"""A band judges only a figure measured the same way: every packaged band says what its figures are (`kind`), a
measured one how (`method`: the way gpuval measures that metric), a derived one from which measured band. The bands
that compared gpuval's own measurement with another program's figure are left out with the reason, and the GPU
models fleets have are identified by their PCI ids."""

from __future__ import annotations

import inspect
from typing import Any, Iterator

import pytest

from gpuval.baselines import GpuIdentity, identify, load_baseline, packaged_skus, with_gpus
from gpuval.baselines.files import _read_packaged
from gpuval.baselines.gpu_models import _nvlink_band, _power_band, gpu_models, link_bands
from gpuval.baselines.kinds import KINDS, check_kind, methods
from gpuval.errors import UsageError

A100_SKUS = ("Standard_ND96asr_v4", "Standard_ND96amsr_A100_v4")


def _packaged() -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """(where, metrics) of every packaged layer: the SKU files and the defaults, each GPU model with the power
    and NVLink bands its boards give, each PCIe generation at x16 and at x8."""
    for name, (_, data) in _read_packaged().items():
        if "metrics" in data:
            yield name, data["metrics"]
    for model in gpu_models():
        yield model.key, model.metrics
        for board in model.boards:
            if board.power_w is not None:
                yield f"{model.key} board", {"power_limit_w": _power_band(board)}
        if model.nvlink.get("links"):
            yield f"{model.key} nvlink", {"nvlinks_per_gpu": _nvlink_band(model)}
    for gen in (3, 4, 5):
        for width in (16, 8):
            yield f"PCIe gen{gen} x{width}", link_bands(gen, width)


def test_every_packaged_band_is_the_same_measurement_or_a_limit():
    """Fails on any band without a kind, a measured band whose method is not how gpuval measures its metric, and a
    derived band whose origin is not a measured band beside it."""
    seen = 0
    for where, metrics in _packaged():
        for metric, band in metrics.items():
            assert band.get("kind") in KINDS, (where, metric, band.get("kind"))
            check_kind(metric, band, where, metrics)
            if band["kind"] == "derived":
                assert metrics[band["derived_from"]]["kind"] in ("gpuval", "same_method"), (where, metric)
            seen += 1
    assert seen > 120


@pytest.mark.parametrize("band, words", [
    ({"kind": "other_program", "expected": 275}, "kind 'other_program' is none of"),
    ({"kind": "same_method", "method": "gemm_burst", "expected": 1155}, "method gemm_burst measures gemm_bf16"),
    ({"kind": "gpuval", "expected": 1155}, "names its method"),
    ({"kind": "limit", "method": "hbm_memcpy", "expected": 0}, "names no method"),
    ({"kind": "derived", "derived_from": "gpu_count", "expected": 1}, "names the measured band of its file"),
])
def test_a_band_of_another_measurement_is_refused(band: dict[str, Any], words: str):
    siblings = {"gpu_count": {"kind": "limit", "expected": 8}, "hbm_memcpy_gbps": band}
    with pytest.raises(UsageError, match=words):
        check_kind("hbm_memcpy_gbps", band, "file.yaml", siblings)


def test_the_methods_are_how_gpuval_measures():
    """The method table says what the code does: a change of size, loop or duration there shows up here."""
    from gpuval.checks.load import SUSTAINED_S
    from gpuval.checks.measure import COPY_BYTES, GEMM_N
    from gpuval.collectives.driver import BenchConfig
    from gpuval.workloads.health import measurer_gpu

    found = methods()
    assert GEMM_N == 8192 and "8192 x 8192 x 8192" in found["gemm_burst"].shape
    assert inspect.signature(measurer_gpu.gemm_burst).parameters["iters"].default == 20
    assert found["gemm_burst"].duration.startswith("20 GEMMs after 3")
    assert SUSTAINED_S == 10 and found["gemm_sustained"].duration.startswith("10 s")
    assert measurer_gpu.HBM_BYTES == 1024**3 and "1 GiB" in found["hbm_memcpy"].shape
    assert COPY_BYTES == measurer_gpu.PEER_BYTES == 512 * 1024**2
    assert all("512 MiB" in found[m].shape for m in ("host_copy_ce", "host_copy_ce_all", "peer_copy_read_ce"))
    assert (measurer_gpu.LOOPS, measurer_gpu.SAMPLES) == (16, 3)
    assert all(found[m].duration.startswith("16 ") and "median of 3" in found[m].duration
               for m in ("hbm_memcpy", "hbm_triad", "host_copy_ce", "peer_copy_read_ce"))
    assert (BenchConfig().iters, BenchConfig().warmup) == (20, 5)
    assert found["nccl_allreduce"].duration.startswith("20 timed iterations after 5 warm-ups")
    assert found["nccl_allreduce"].measures("allreduce_busbw_16node_gbps")


def test_bands_of_other_programs_are_left_out_with_why():
    """The A100 burst (superbench CUTLASS), the A100 and V100 sustained bands (a cuBLAS or torch burst), the H100
    bf16 burst 797.5 (above the best measured H100 matmul and gpuval's own H200 785), BabelStream triads and
    bandwidthTest memcpys judged gpuval's figures; now nothing judges them and each model says why."""
    models = {m.key: m for m in gpu_models()}
    for key in ("a100_sxm4_40gb", "a100_sxm4_80gb"):
        assert "gemm_fp16_tflops" not in models[key].metrics and "CUTLASS" in models[key].left_out["gemm_fp16_tflops"]
    assert "797.5" in models["h100_sxm5"].left_out["gemm_bf16_tflops"]
    assert "785" in models["h100_sxm5"].left_out["gemm_bf16_tflops"]
    for sku in A100_SKUS:
        base = load_baseline(sku)
        for metric in ("gemm_fp16_tflops", "gemm_sustained_bf16_tflops", "hbm_memcpy_gbps"):
            assert base.band(metric) is None and metric in base.raw["left_out"], (sku, metric)
    assert load_baseline("Standard_ND40rs_v2").band("gemm_sustained_fp16_tflops") is None
    assert load_baseline("Standard_ND96isr_H100_v5").band("hbm_triad_gbps") is None
    h200 = load_baseline("Standard_ND96isr_H200_v5")  # BabelStream's 4150 was the SKU's; the model's own run judges
    assert h200.band("hbm_triad_gbps").expected == 4370 and h200.band("hbm_triad_gbps").kind == "gpuval"


def test_gen4_h2d_warns_at_the_published_minimum_and_small_errors_are_mended():
    """Gen4 warned at 24.6 (5% under one AMD-host superbench figure): healthy Intel hosts read 22-25. The H200 SKU
    cited the H100's sizes page, and failed P2P 5% under AzNHC's minimum where the H100 failed at it."""
    gen4 = link_bands(4, 16)["h2d_gbps"]
    assert (gen4["expected"], gen4["warn_below"], gen4["fail_below"]) == (21, 21, 19.95)
    assert load_baseline("Standard_ND96asr_v4").band("h2d_gbps").warn_below == 21
    h100, h200 = (load_baseline(s).band("p2p_read_gbps") for s in ("Standard_ND96isr_H100_v5",
                                                                     "Standard_ND96isr_H200_v5"))
    assert (h100.warn_below, h100.fail_below) == (h200.warn_below, h200.fail_below) == (335, 318.25)
    assert "H100" not in load_baseline("Standard_ND96isr_H200_v5").band("gpu_count").expected_source
    for sku in packaged_skus():
        assert all("reference.md" not in b.expected_source or b.kind == "limit"
                   for b in load_baseline(sku).bands.values()), sku


@pytest.mark.parametrize("gpu, key, power, links", [
    (GpuIdentity("", 0x2237, 0x152F10DE, 300.0, 4, 16, False), "a10g", None, None),
    (GpuIdentity("", 0x20F1, 0x145F10DE, 250.0, 4, 16, True), "a100_pcie_40gb", 250, None),
    (GpuIdentity("", 0x20F1, 0x145F10DE, 300.0, 4, 16, False), "a100_pcie_40gb", None, None),
    (GpuIdentity("", 0x2324, 0x17A610DE, 700.0, 5, 16, True), "h800", None, None),
    (GpuIdentity("", 0x2329, 0x187710DE, 500.0, 5, 16, True), "h20", None, None),
    (GpuIdentity("", 0x2339, None, 700.0, 5, 16, True), "h100_sxm5_94gb", None, 18),
    (GpuIdentity("", 0x2337, None, 700.0, 5, 16, True), "h100_sxm5_64gb", None, 18),
    (GpuIdentity("", 0x26B5, 0x169D10DE, 300.0, 4, 16, False), "l40", 300, None),
    (GpuIdentity("", 0x2901, 0x199910DE, 1000.0, 5, 16, True), "b200", None, 18),
    (GpuIdentity("NVIDIA GB200", 0x2941, None, 1200.0, 5, 16, True), "gb200", None, 18),
    # the A100 80GB board DCGM loads at 274 W and one nvidia-smi reads at 500 W: its 500 W only where NVML says so
    (GpuIdentity("", 0x20B2, 0x147F10DE, 500.0, 4, 16, True), "a100_sxm4_80gb", 500, 12),
    (GpuIdentity("", 0x20B2, 0x147F10DE, 275.0, 4, 16, True), "a100_sxm4_80gb", None, 12),
])
def test_the_models_fleets_have_are_identified(gpu: GpuIdentity, key: str, power: float | None, links: int | None):
    model, _, how = identify(gpu)
    assert model is not None and model.key == key, how
    limits = with_gpus(None, [gpu])
    assert (limits.band("power_limit_w").expected if limits.band("power_limit_w") else None) == power
    assert (limits.band("nvlinks_per_gpu").expected if limits.band("nvlinks_per_gpu") else None) == links
    assert (limits.band("h2d_gbps") is None) is (key == "gb200")  # NVLink-C2C to its Grace CPU, no PCIe band
