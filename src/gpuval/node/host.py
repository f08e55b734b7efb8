"""Identity of this host for Result records."""

from __future__ import annotations

import os
import socket

from gpuval.results.model import Where


def hostname() -> str:
    """Short host name, as nccl-tests prints it."""
    return socket.gethostname().split(".")[0]


def where(ranks: int | None = None, engine: str | None = None, sku: str | None = None) -> Where:
    """This host as a Where record; the SKU comes from the caller or GPUVAL_SKU."""
    return Where(
        hostname=hostname(),
        sku=sku or os.environ.get("GPUVAL_SKU"),
        ranks=ranks,
        engine=engine,
        job_id=os.environ.get("SLURM_JOB_ID") or os.environ.get("AZUREML_RUN_ID") or os.environ.get("GPUVAL_JOB_ID"),
    )
