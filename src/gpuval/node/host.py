"""Identity of this host for Result records."""

from __future__ import annotations

import os
import socket

from gpuval.node.imds import detect_sku
from gpuval.results.model import Where


def hostname() -> str:
    """Short host name, as nccl-tests prints it."""
    return socket.gethostname().split(".")[0]


def where(ranks: int | None = None, engine: str | None = None, sku: str | None = None,
          gpu_model: str | None = None, gpu_count: int | None = None) -> Where:
    """This host as a Where record; the SKU from the caller, else as `gpuval health` finds it (GPUVAL_SKU, then
    Azure IMDS, asked once per process), so every record of a run names the same SKU; GPUs from the caller or NVML."""
    if gpu_count is None:
        gpu_model, gpu_count = _gpus()
    return Where(
        hostname=hostname(),
        sku=detect_sku(sku),
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        ranks=ranks,
        engine=engine,
        job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("AZUREML_RUN_ID") or os.environ.get("GPUVAL_JOB_ID"),
    )


def _gpus() -> tuple[str | None, int]:
    """GPU model and count from NVML; (None, 0) without a driver."""
    from gpuval.node.machine import HardwareUnavailable
    from gpuval.node.nvml import read_inventory

    try:
        inv = read_inventory()
    except HardwareUnavailable:
        return None, 0
    return (inv.gpus[0].name if inv.gpus else None), len(inv.gpus)
