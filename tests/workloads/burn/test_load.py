"""The GEMM load of `gpuval burn` and the sustained checks, on the torch stand-in (simulated GPU time, a GPU that
starts computing wrong after N products) and the pynvml stand-in (clock event reasons per GPU), sampled for real
by node.sampler's thread while the load runs."""

from __future__ import annotations

import pytest

from gpuval.checks.load import burn_check
from gpuval.results.model import Status
from gpuval.workloads.burn.load import gemm_load
from tests.health_support import H100, context, cpu_torch, no_imds  # noqa: F401
from tests.node.fake_nvml import h100_node
from tests.node.fake_nvml import install as install_nvml
from tests.workloads.health.torch_standin import h100_devices, install


def _two(torch):
    from gpuval.checks.measured import GpuRef

    return [(0, GpuRef(0, "00000001:00:00.0")), (1, GpuRef(1, "00000002:00:00.0"))]


def test_a_gpu_computing_differently_and_throttling_is_seen(monkeypatch):
    torch = install(monkeypatch, {"devices": h100_devices(tflops={1: 610.0}, wrong_after={1: 400})})
    install_nvml(monkeypatch, h100_node({1: {"reasons": 0x80 | 0x4, "sm_now": 1410}}))
    first, second = gemm_load(torch, _two(torch), "bf16", seconds=0.3)
    assert first.tflops == pytest.approx(700.0) and second.tflops == pytest.approx(610.0)
    assert first.mismatches == 0 and second.mismatches >= 1 and second.windows >= 1
    assert first.checksum == second.checksum  # the same first product on both: the same input, the same bits
    assert second.reasons_seen == ["software power cap", "hardware power brake"] and second.sm_mhz_median == 1410
    assert first.reasons_seen == []


def test_without_nvml_the_load_still_gives_its_figures(monkeypatch):
    """No NVML (a driver-less test box, an NVML error): TFLOPS and results, no samples, never no figures."""
    torch = install(monkeypatch, {"devices": h100_devices()})
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import pynvml fails
    (only,) = gemm_load(torch, _two(torch)[:1], "fp16", seconds=0.05)
    assert only.tflops == pytest.approx(700.0) and only.sm_mhz_median is None and only.reasons_seen == []


def test_burn_fails_the_gpu_that_slows_throttles_or_computes_differently(monkeypatch):
    """Every GPU at once through the real measurer: GPU 6 computes wrong, GPU 2 is 13% slower than the fastest and
    hits a hardware power brake; each is named by NVML index and bus id, the others are not."""
    install(monkeypatch, {"devices": h100_devices(tflops={2: 609.0}, wrong_after={6: 300})})
    install_nvml(monkeypatch, h100_node({2: {"reasons": 0x80}}))
    result = burn_check(0.3).run(context(H100, cpu_torch))
    assert result.status is Status.FAIL and result.name == "burn" and result.fault_code == "GPU_BURN_FAILED"
    assert "GPU 6 (0000000B:00:00.0): " in result.reason and "silent data corruption" in result.reason
    assert "GPU 2 (00000003:00:00.0): 609 TFLOPS, 13.0% under the node's fastest GPU" in result.reason
    assert "GPU 2 (00000003:00:00.0): hardware power brake under load" in result.reason
    assert "GPU 0 " not in result.reason
    per_gpu = {g["gpu"]: g for g in result.details["gpus"]}
    assert per_gpu["GPU 2 (00000003:00:00.0)"]["reasons"] == ["hardware power brake"]
    assert per_gpu["GPU 6 (0000000B:00:00.0)"]["mismatches"] >= 1


def _h200_node(data):
    """The recorded H100 node's layout with H200 SXM GPUs (the PCI ids of gpuval's H200 run) and no SKU: the GPU
    model found on the node judges the load (gpuval's own calibration: 670 TFLOPS, warn under 615, fail under 570)."""
    cpu_torch(data)
    data["sku"] = None
    data["gpu_defaults"].update(name="NVIDIA H200", pci_device_id=0x233510DE, pci_subsystem_id=0x18BF10DE)


def test_a_healthy_node_burns_clean_and_a_slowish_gpu_warns(monkeypatch):
    """A software power cap is how a GPU runs a full GEMM at its power limit: not a finding (it draws that limit).
    A GPU 4.4% under its
    peers is within the node's spread but under its GPU model's warn limit (H200 SXM: 615 TFLOPS, measured by
    gpuval; the H100's borrowed 730 from gpu-fryer is gone)."""
    install(monkeypatch, {"devices": h100_devices(tflops={i: 720.0 for i in range(8)})})
    install_nvml(monkeypatch, h100_node({i: {"reasons": 0x4, "power_now_mw": 700_000} for i in range(8)}))
    clean = burn_check(0.2).run(context(H100, _h200_node))
    assert clean.status is Status.PASS and "8 GPUs at once, bf16 GEMM 0.2 s: 720-720 TFLOPS" in clean.reason
    assert "reasons seen: software power cap" in clean.reason and "0 wrong results" in clean.reason
    assert "peak power 700 W of a 700 W limit at the lowest (100%)" in clean.reason  # at its cap: its limit drawn
    install(monkeypatch, {"devices": h100_devices(tflops={**{i: 640.0 for i in range(8)}, 3: 612.0})})
    slowish = burn_check(0.2).run(context(H100, _h200_node))
    assert slowish.status is Status.WARN
    assert "GPU 3 (00000008:00:00.0)" in slowish.reason and "warn limit 615" in slowish.reason
