"""Another tenant on the GPU, for the GPU check's busy step: bf16 GEMMs back to back on GPU 0 for SECONDS.

    python scripts/gpu-check-load.py SECONDS

gpuval must then call the GPU busy (ERROR GPU_BUSY, naming this process), never broken.
"""

from __future__ import annotations

import sys
import time

import torch


def main(seconds: float) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(float(sys.argv[1]))
