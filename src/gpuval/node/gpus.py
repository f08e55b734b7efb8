"""How many NVIDIA GPUs this process may use, without importing torch."""

from __future__ import annotations

import os


def visible_gpu_count() -> int:
    """GPUs NVML sees, narrowed by CUDA_VISIBLE_DEVICES; 0 without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU for us
        return 0
