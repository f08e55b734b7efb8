"""nccl-tests' `-J` JSON document (src/util.cu, JSON_FILE_VERSION 2), written with the same keys and quirks
(root as its printed "%6i" text, booleans as the strings "true"/"false") so tools that read nccl-tests JSON
read gpuval's."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

from gpuval.collectives.driver import BenchConfig, DeviceInfo
from gpuval.collectives.table import Table

JSON_FILE_VERSION = 2
_ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_MCA_", "CUDA_", "GPUVAL_")  # never the whole environment: it holds secrets


def _stamp(when: datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def document(
    cfg: BenchConfig, devices: list[DeviceInfo], table: Table, started: datetime, ended: datetime,
    nccl_version: int | None, errors: list[str] | None = None, argv: list[str] | None = None,
) -> dict[str, Any]:
    """The whole -J document for one finished (or interrupted) sweep."""
    config: dict[str, Any] = {
        "nthreads": 1,
        "ngpus": 1,
        "minimum_bytes": cfg.min_bytes,
        "maximum_bytes": cfg.max_bytes,
    }
    config.update({"step_factor": cfg.step_factor} if cfg.step_factor > 1 else {"step_bytes": cfg.step_bytes})
    config.update(
        warmup_iters=cfg.warmup, iterations=cfg.iters, aggregated_iterations=cfg.agg_iters, validation=cfg.check,
        graph=cfg.graph, blocking_collectives=_bool(False), per_iter_timing=_bool(False), parallel_init=_bool(False),
    )
    results = []
    for row in table.rows:
        entry = row.to_json()
        entry["root"] = f"{row.root if row.root is not None else -1:6d}"
        entry["actual_iterations"] = cfg.iters
        entry["experiment_name"] = cfg.program
        results.append(entry)
    avg = table.average_busbw()
    return {
        "version": JSON_FILE_VERSION,
        "start_time": _stamp(started),
        "args": list(argv if argv is not None else sys.argv),
        "env": sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)),
        "nccl_version": nccl_version,
        "config": config,
        "devices": [d.to_json() for d in devices],
        "results": results,
        "out_of_bounds": {"count": table.total_wrong(), "okay": _bool(table.total_wrong() == 0)},
        "average_bus_bandwidth": {"bandwidth": avg, "okay": "unchecked"},
        "errors": errors or [],
        "end_time": _stamp(ended),
    }
