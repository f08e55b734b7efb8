"""Another tenant on the GPU, for the GPU check's busy steps: bf16 GEMMs back to back on GPU 0 for SECONDS, or
duty-cycled (ON_S of GEMMs, then OFF_S idle, again and again: a tenant pausing for data loading or a checkpoint).

    python scripts/gpu-check-load.py SECONDS [ON_S OFF_S]

gpuval must then call the GPU busy (ERROR GPU_BUSY, naming this process, or by host pid in a PID namespace of its
own), never broken.
"""

from __future__ import annotations

import sys
import time

import torch


def main(seconds: float, on_s: float | None = None, off_s: float = 0.0) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        burst = time.monotonic() + (on_s if on_s is not None else seconds)
        while time.monotonic() < min(burst, end):
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        if on_s is not None:
            time.sleep(off_s)


if __name__ == "__main__":
    main(float(sys.argv[1]), *(float(v) for v in sys.argv[2:4]))
