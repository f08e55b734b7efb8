"""Measurements on this machine's GPUs from one process, each on a CUDA device already matched to its NVML GPU:
a GEMM burst, device memory bandwidth (memcpy and triad), and copy-engine bandwidth between every pair of GPUs.

Timing follows nvbandwidth: a sample is `loops` back-to-back operations between two CUDA events on one stream
(launch gaps hidden behind the work), and the figure is the median of the samples. Bytes are 10^9 per GB.
GPU-to-GPU `write` is torch's cross-device copy, which runs on the source GPU's stream (its copy engine pushes into
the peer); `read` is a cudaMemcpyAsync on the destination GPU's stream (its copy engine pulls from the peer), called
through the CUDA runtime torch itself loaded, as nvbandwidth's read test runs in the destination's context.
"""

from __future__ import annotations

import ctypes
import statistics
from typing import Any, Callable

from gpuval.checks.measure import GEMM_N
from gpuval.checks.measured import GpuRef, HbmFigure, PeerFigure

LOOPS = 16  # operations per sample (nvbandwidth's default loop count)
SAMPLES = 3  # samples per figure, median taken (nvbandwidth's default)
PEER_BYTES = 512 * 1024**2  # per copy between GPUs (nvbandwidth's default buffer)
HBM_BYTES = 1024**3  # per array of the memcpy and triad
CUDA_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the runtime infers the direction from unified addresses

Device = tuple[int, GpuRef]  # (CUDA ordinal in this process, the NVML GPU it is)


def timed(torch: Any, op: Callable[[], Any], nbytes: int, loops: int = LOOPS, samples: int = SAMPLES,
          stream: Any = None) -> float:
    """Median GB/s of `samples` samples of `loops` calls of `op` (each moving `nbytes`), timed with CUDA events
    recorded on `stream` (the current stream when None); one untimed call first."""
    op()
    values = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(loops):
            op()
        end.record(stream)
        end.synchronize()
        values.append(nbytes * loops / (start.elapsed_time(end) / 1e3) / 1e9)
    return statistics.median(values)


def gemm_burst(torch: Any, devices: list[Device], dtype: str, iters: int = 20) -> list[tuple[GpuRef, float]]:
    """Per GPU: TFLOPS of `iters` square GEMMs after 3 warm-ups (a burst: tens of milliseconds)."""
    kind = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    out = []
    for cuda, ref in devices:
        with torch.cuda.device(cuda):
            a = torch.randn(GEMM_N, GEMM_N, dtype=kind, device=f"cuda:{cuda}")
            b = torch.randn(GEMM_N, GEMM_N, dtype=kind, device=f"cuda:{cuda}")
            for _ in range(3):
                torch.matmul(a, b)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                torch.matmul(a, b)
            end.record()
            end.synchronize()
            out.append((ref, 2 * GEMM_N**3 * iters / (start.elapsed_time(end) / 1e3) / 1e12))
            del a, b
    return out


def hbm(torch: Any, devices: list[Device]) -> list[HbmFigure]:
    """Per GPU: device-to-device memcpy GB/s (read + write counted) and triad a = b + s*c GB/s (three arrays)."""
    out = []
    count = HBM_BYTES // 4
    for cuda, ref in devices:
        with torch.cuda.device(cuda):
            a = torch.empty(count, dtype=torch.float32, device=f"cuda:{cuda}")
            b = torch.ones(count, dtype=torch.float32, device=f"cuda:{cuda}")
            c = torch.ones(count, dtype=torch.float32, device=f"cuda:{cuda}")
            memcpy = timed(torch, lambda: a.copy_(b), 2 * HBM_BYTES)
            triad = timed(torch, lambda: torch.add(b, c, alpha=0.4, out=a), 3 * HBM_BYTES)
            out.append(HbmFigure(ref, memcpy, triad))
            del a, b, c
    return out


def cudart() -> Any:
    """The CUDA runtime library this process (torch) loaded, through ctypes; None when none is loaded as a shared
    library (a static build)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                        ctypes.c_void_p]
        lib.cudaMemcpyAsync.restype = ctypes.c_int
        return lib
    return None


def _pull(torch: Any, rt: Any, dst: Any, src: Any, stream: Any) -> Callable[[], None]:
    """A copy of `src` into `dst` issued on `stream` (the destination GPU's): its copy engine reads the peer."""
    def op() -> None:
        code = rt.cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.numel(), CUDA_MEMCPY_DEFAULT,
                                  stream.cuda_stream)
        if code != 0:
            raise RuntimeError(f"cudaMemcpyAsync returned CUDA error {code}")
    return op


def peers(torch: Any, devices: list[Device], rt: Any = None) -> list[PeerFigure]:
    """Copy-engine GB/s of every ordered pair (src, dst): write (run by src) and read (run by dst). Pairs
    without peer access get None. Writes go first: torch enables peer access on its first copy of each ordered
    pair, which the reads (the other direction's context) then use."""
    bufs = {cuda: (torch.empty(PEER_BYTES, dtype=torch.uint8, device=f"cuda:{cuda}"),
                   torch.empty(PEER_BYTES, dtype=torch.uint8, device=f"cuda:{cuda}")) for cuda, _ in devices}
    pairs = [(s, d) for s in devices for d in devices if s[0] != d[0]]
    access = {(s[0], d[0]): bool(torch.cuda.can_device_access_peer(s[0], d[0])) for s, d in pairs}
    writes: dict[tuple[int, int], float] = {}
    for (si, _), (di, _) in pairs:
        if access[(si, di)] and access[(di, si)]:
            with torch.cuda.device(si):
                src, dst = bufs[si][0], bufs[di][1]
                writes[(si, di)] = timed(torch, lambda: dst.copy_(src, non_blocking=True), PEER_BYTES)
    out = []
    for (si, sref), (di, dref) in pairs:
        read = None
        if rt is not None and (si, di) in writes:
            with torch.cuda.device(di):
                stream = torch.cuda.current_stream(di)
                read = timed(torch, _pull(torch, rt, bufs[di][1], bufs[si][0], stream), PEER_BYTES, stream=stream)
        out.append(PeerFigure(sref, dref, read, writes.get((si, di))))
    return out
