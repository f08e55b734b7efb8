"""The health workload's torch measurer, on real gloo ranks (the path NCCL takes on a GPU node)."""

from __future__ import annotations

from gpuval.checks.measured import GpuRef
from gpuval.workloads.health.measurer import TorchMeasurer


def test_health_allreduce_saves_no_collective_record(tmp_path):
    """A real 2-rank all_reduce through the health measurer (gloo on CPU, the path NCCL takes on a GPU node):
    it measures, counts no wrong element, and leaves no `collective all_reduce` record beside the health one."""
    results = tmp_path / "results.jsonl"
    gpus = [GpuRef(0, "0001:00:00.0"), GpuRef(1, "0002:00:00.0")]
    measured = TorchMeasurer("health-run", str(results), backend="gloo").allreduce_busbw(1024**2, gpus, 1, {})
    assert measured.busbw > 0 and measured.wrong == 0 and measured.ranks == 2
    assert not results.exists() or not results.read_text().strip()


# ---- the torch stand-in (tests/helpers/fake_torch): what the measurer does on a GPU node, figures known exactly --

import pytest  # noqa: E402

from gpuval.checks.base import REGISTRY  # noqa: E402
from gpuval.collectives.table import Row, Side, Table  # noqa: E402
from gpuval.results.model import Status  # noqa: E402
from tests.health_support import H100, context, cpu_torch, no_imds  # noqa: E402, F401
from tests.workloads.health.torch_standin import h100_devices, install  # noqa: E402

NDV4_PRESET = "2,1,7,5,3,0,6,4"  # engines/data/network-presets.yaml: CUDA_VISIBLE_DEVICES of the NDv4 preset
# what torch raised on an A100 node whose NVSwitch fabric was not up (CUDA error 802, a cluster's Q&A log)
ERROR_802 = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
             "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized")


def test_nvml_gpus_but_cuda_cannot_start_says_cudas_own_error(monkeypatch):
    """Item 8: NVML sees eight GPUs, CUDA fails with error 802 (fabric manager down on HGX): the checks say CUDA's
    words and what 802 means, never "a CPU-only torch build?"."""
    install(monkeypatch, {"cuda": "12.4", "init_error": ERROR_802, "devices": h100_devices()})
    result = REGISTRY["h2d_d2h_bandwidth"].run(context(H100, cpu_torch))
    assert result.status is Status.ERROR
    assert "NVML sees GPUs but CUDA cannot start: Unexpected error from cudaGetDeviceCount()" in result.reason
    assert "Error 802: system not yet initialized" in result.reason and "nvidia-fabricmanager" in result.reason
    assert "CPU-only" not in result.reason


def test_a_cpu_only_torch_build_is_named(monkeypatch):
    install(monkeypatch, {"cuda": None, "devices": []})
    result = REGISTRY["gemm_tflops"].run(context(H100, cpu_torch))
    assert result.status is Status.ERROR and "torch 2.13.0+fake is a CPU-only build" in result.reason
    assert result.reason.count("CPU-only build") == 1  # bf16 and fp16 failed alike: said once


def test_the_slow_gpu_is_named_by_nvml_index_whatever_cuda_calls_it(monkeypatch):
    """With the NDv4 preset's CUDA_VISIBLE_DEVICES, CUDA device 3 is NVML GPU 5. A slow NVML GPU 5 must
    be blamed as GPU 5 and its bus id (before: "GPU 3", another GPU)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", NDV4_PRESET)  # read when CUDA starts, as CUDA does
    install(monkeypatch, {"devices": h100_devices(tflops={5: 400.0})})
    result = REGISTRY["gemm_tflops"].run(context(H100, cpu_torch))
    assert "GPU 5 (0000000A:00:00.0)" in result.reason and "GPU 3" not in result.reason
    rows = {row["index"]: row for row in result.details["gpus"]}  # the one per-GPU form, by NVML index
    assert rows[5]["bf16"] == 400.0 and rows[3]["bf16"] == 700.0
    assert rows[5]["bus_id"] == "0000000A:00:00.0" and rows[5]["gpu"] == "GPU 5 (0000000A:00:00.0)"


def test_gpus_cuda_cannot_see_are_left_out_and_said(monkeypatch):
    """A Slurm job's CUDA_VISIBLE_DEVICES=0,1 on an eight-GPU node: two GPUs measured, the six others named as not
    measured (not visible to CUDA here), none blamed."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    install(monkeypatch, {"devices": h100_devices()})
    result = REGISTRY["hbm_bandwidth"].run(context(H100, cpu_torch))
    assert result.status is Status.PASS, result  # no H100 HBM band of gpuval's own: the floor and the two peers
    assert [g["gpu"] for g in result.details["gpus"]] == ["GPU 0 (00000001:00:00.0)", "GPU 1 (00000002:00:00.0)"]
    assert "GPU 2 (00000003:00:00.0)" in result.reason and "not visible to CUDA in this process" in result.reason


def test_memory_and_peer_figures_are_what_the_gpus_do(monkeypatch):
    """HBM memcpy (read + write counted) and triad (three arrays), peer write on the source GPU's stream and read on
    the destination's (the CUDA runtime stand-in asserts the stream): the figures configured come back, per GPU
    and per pair, named by NVML index."""
    torch = install(monkeypatch, {"devices": h100_devices(hbm={2: 2000.0}, read={4: {"recorded-ndv5-1": 160.0}})})
    from gpuval.checks.measured import GpuRef
    from gpuval.workloads.health.measurer_gpu import hbm, peers

    refs = [GpuRef(i, f"{b}:00:00.0") for i, b in enumerate(["0001", "0002", "0003", "0008", "0009"])]
    devices = list(enumerate(refs))
    memory = {f.gpu.index: (f.memcpy, f.triad) for f in hbm(torch, devices)}
    assert memory[2] == pytest.approx((2000.0, 2000.0)) and memory[0] == pytest.approx((3000.0, 3000.0))
    pairs = {(f.src.index, f.dst.index): (f.read, f.write) for f in peers(torch, devices, torch.FakeCudart())}
    assert len(pairs) == 20
    assert pairs[(1, 4)] == pytest.approx((160.0, 370.0))  # GPU 4 reads GPU 1 slowly; writes are fine
    assert pairs[(4, 1)] == pytest.approx((371.0, 370.0))
    without = peers(torch, devices, None)
    assert all(f.read is None and f.write == pytest.approx(370.0) for f in without)


def _table(out_of_place: float, in_place: float) -> Table:
    side = lambda bw: Side(time=1.0, alg_bw=bw, bus_bw=bw, nwrong=0)  # noqa: E731
    return Table(collective="all_reduce", nranks=8, rows=[Row(8 << 30, 1 << 31, "float", "sum", -1,
                                                              side(out_of_place), side(in_place))])


def test_allreduce_is_the_mean_of_both_sides_and_ranks_are_the_cuda_gpus(monkeypatch):
    """AzNHC judges nccl-tests' Avg bus bandwidth, the mean of out-of-place and in-place at its one
    size: 229.9 and 226.1 are 228.0, not 229.9 (the better side). The ranks are the GPUs CUDA sees here (a
    Slurm subset of 2), named to CUDA by UUID."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-recorded-ndv5-6,GPU-recorded-ndv5-3")
    install(monkeypatch, {"devices": h100_devices()})
    from gpuval.workloads.health.measurer import TorchMeasurer

    calls = []

    def run(self, size, ranks, iters, warmup, env):
        calls.append((ranks, dict(env)))
        return _table(229.9, 226.1), None

    monkeypatch.setattr(TorchMeasurer, "_run", run)
    ctx = context(H100, cpu_torch)
    measured = ctx.measurer.allreduce_busbw(8 << 30, [g for g in _refs(ctx)], 2, {})
    assert measured.busbw == pytest.approx(228.0) and measured.ranks == 2
    assert measured.gpus == ["GPU 3 (00000008:00:00.0)", "GPU 6 (0000000B:00:00.0)"]
    assert calls[0][0] == 2 and calls[0][1]["CUDA_VISIBLE_DEVICES"] == "GPU-recorded-ndv5-3,GPU-recorded-ndv5-6"
    assert calls[0][1]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def _refs(ctx):
    from gpuval.checks.measured import targets

    return targets(ctx)[0]
