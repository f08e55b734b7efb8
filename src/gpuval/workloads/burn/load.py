"""A GEMM load kept running on GPUs for seconds, sampled through NVML: what `gpuval burn` runs (every GPU at once)
and what the health suite's sustained checks run (each GPU alone, then all at once).

Each GPU multiplies the same two matrices (made once on the CPU from a fixed seed, so every GPU gets the same bits)
again and again, in windows of about half a second between CUDA events. After each window the product is compared
on the GPU with the GPU's first product of the same input: cuBLAS gives the same bits for the same input on the same
architecture and SM count, so a difference is a GPU computing wrongly (gpu-burn's check). A checksum of the first
product lets the node compare GPUs with each other. Meanwhile `node.sampler.NvmlSampler` reads SM clock, power,
temperature and clock event reasons every 100 ms.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from gpuval.checks.measure import GEMM_N
from gpuval.checks.measured import GpuRef, LoadFigure
from gpuval.node.sampler import LoadSummary, NvmlSampler

WINDOW_S = 0.5  # GEMMs between two events: long enough to hide launch gaps, short enough to see a GPU slow down
SEED = 20240611


@dataclass
class _OnGpu:
    """One GPU's buffers and what it measured."""

    cuda: int
    ref: GpuRef
    a: Any
    b: Any
    c: Any
    first: Any
    checksum: str
    tflops: list[float] = field(default_factory=list)
    mismatches: int = 0
    pending: Any = None  # (start, end, wrong-count tensor) of the window in flight


def inputs(torch: Any, dtype: str, n: int = GEMM_N) -> tuple[Any, Any]:
    """The two input matrices, on the CPU, the same bits every time."""
    kind = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    gen = torch.Generator().manual_seed(SEED)
    return (torch.randn(n, n, generator=gen).to(kind), torch.randn(n, n, generator=gen).to(kind))


def _setup(torch: Any, cuda: int, ref: GpuRef, a: Any, b: Any) -> _OnGpu:
    device = f"cuda:{cuda}"
    with torch.cuda.device(cuda):
        ga, gb = a.to(device), b.to(device)
        first = torch.matmul(ga, gb)
        torch.cuda.synchronize(cuda)
        raw = first.view(torch.int16).cpu().numpy().tobytes()  # the bits of the product, whatever its dtype
        return _OnGpu(cuda, ref, ga, gb, torch.empty_like(first), first, hashlib.sha256(raw).hexdigest()[:16])


def _per_window(torch: Any, g: _OnGpu) -> int:
    """GEMMs in one window, from the time of a few on this GPU."""
    with torch.cuda.device(g.cuda):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            torch.matmul(g.a, g.b, out=g.c)
        end.record()
        end.synchronize()
        return max(1, int(WINDOW_S / max(start.elapsed_time(end) / 3e3, 1e-6)))


def _launch(torch: Any, g: _OnGpu, count: int) -> None:
    """Queue one window on the GPU's stream: events around `count` GEMMs, then the comparison (no wait here)."""
    with torch.cuda.device(g.cuda):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            torch.matmul(g.a, g.b, out=g.c)
        end.record()
        g.pending = (start, end, torch.ne(g.c, g.first).sum())


def _collect(g: _OnGpu, count: int, n: int) -> None:
    start, end, wrong = g.pending
    end.synchronize()
    g.tflops.append(2 * n**3 * count / (start.elapsed_time(end) / 1e3) / 1e12)
    g.mismatches += int(wrong.item() > 0)
    g.pending = None


def _sampler(gpus: list[int]) -> NvmlSampler | None:
    """An NVML sampler running on `gpus`, or None where NVML cannot sample (the load still runs, unsampled)."""
    sampler = NvmlSampler(gpus)
    try:
        sampler.__enter__()
    except Exception:  # no NVML here (NoGpuDriver, an NVML error): figures without samples, never no figures
        return None
    return sampler


def _figure(g: _OnGpu, summary: LoadSummary | None) -> LoadFigure:
    s = summary
    return LoadFigure(g.ref, statistics.median(g.tflops), min(g.tflops), len(g.tflops),
                      s.sm_mhz_median if s else None, s.sm_mhz_min if s else None, s.power_w_max if s else None,
                      s.temperature_c_max if s else None, list(s.reasons_seen) if s else [], g.mismatches, g.checksum,
                      list(s.appeared) if s else [], s.memory_temperature_c_max if s else None)


def gemm_load(torch: Any, devices: list[tuple[int, GpuRef]], dtype: str, seconds: float,
              n: int = GEMM_N) -> list[LoadFigure]:
    """Run GEMMs on every device at once for `seconds`; per GPU its TFLOPS per window, its wrong results, and
    what NVML sampled meanwhile. `devices`: (CUDA ordinal here, the NVML GPU it is)."""
    a, b = inputs(torch, dtype, n)
    gpus = [_setup(torch, cuda, ref, a, b) for cuda, ref in devices]
    counts = {g.cuda: _per_window(torch, g) for g in gpus}
    sampler = _sampler([g.ref.index for g in gpus])
    try:
        deadline = time.monotonic() + seconds
        while True:
            for g in gpus:  # queue every GPU's window before waiting on any: all GPUs stay busy together
                _launch(torch, g, counts[g.cuda])
            for g in gpus:
                _collect(g, counts[g.cuda], n)
            if time.monotonic() >= deadline:
                break
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
    summaries = {s.gpu: s for s in sampler.summaries()} if sampler is not None else {}
    return [_figure(g, summaries.get(g.ref.index)) for g in gpus]
