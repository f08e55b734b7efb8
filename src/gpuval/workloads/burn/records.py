"""The burn's Result record: kind "health" with name "burn", built by THE health factory.

A burn is one verdict on one node, with a fault code, the lowest TFLOPS as its value and the per-GPU figures in its
details: exactly what a health record holds (results.data.HealthData), so it is stored, queried, reported and acted
on (drain, taint) as every other node check is, with no new kind to migrate."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuval.checks.base import CheckResult
from gpuval.results import Result, Where
from gpuval.workloads.health.records import health_record


def burn_record(result: CheckResult, where: Where, run_id: str, started: datetime,
                params: dict[str, Any] | None = None) -> Result:
    """The burn's verdict as a health record named "burn"."""
    return health_record(result, where, run_id, started, params)
