"""Independent figures through torch alone, for the GPU check (scripts/gpu-check.sh): device-to-device copy (HBM,
bytes read and written), pinned host-to-device and device-to-host copies, a bf16 8192^3 GEMM burst. Nothing of
gpuval is used, so gpuval's own figures can be held against them. Prints one JSON object."""

from __future__ import annotations

import json
import sys

import torch


def timed(fn, repeats: int) -> float:
    """Seconds per call: median of `repeats` CUDA-event timings after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return sorted(times)[len(times) // 2]


def main() -> None:
    dev = torch.device("cuda", 0)
    n = 1 << 30  # 1 GiB each way
    a, b = torch.empty(n, dtype=torch.uint8, device=dev), torch.empty(n, dtype=torch.uint8, device=dev)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    x, y = (torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev) for _ in range(2))
    gemm = timed(lambda: torch.mm(x, y), 10)
    out = {
        "device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "d2d_copy_GBps_rw": 2 * n / timed(lambda: b.copy_(a), 10) / 1e9,
        "h2d_pinned_GBps": n / timed(lambda: a.copy_(host, non_blocking=True), 5) / 1e9,
        "d2h_pinned_GBps": n / timed(lambda: host.copy_(a, non_blocking=True), 5) / 1e9,
        "gemm_bf16_8192_TFLOPS": 2 * 8192**3 / gemm / 1e12,
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
