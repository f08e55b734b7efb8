"""THE health Result factory: one check's CheckResult as a Result record (kind "health"). `where` is always given:
`gpuval health` passes this machine's, an imported NCCL log the node it names."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuval.checks.base import CheckResult
from gpuval.results import Metric, Result, Where


def health_record(result: CheckResult, where: Where, run_id: str, started: datetime,
                  params: dict[str, Any] | None = None, finished: datetime | None = None) -> Result:
    """The check's verdict, its numeric value as a metric, and what it read (data: fault code, value, expected,
    unit, details)."""
    metrics = []
    if isinstance(result.value, (int, float)) and not isinstance(result.value, bool):
        metrics.append(Metric(name=result.name, value=float(result.value), unit=result.unit))
    return Result(
        run_id=run_id, kind="health", name=result.name, started_at=started,
        finished_at=finished or datetime.now(timezone.utc), where=where, params=params or {}, metrics=metrics,
        status=result.status, reason=result.reason,
        data={"fault_code": result.fault_code, "value": result.value, "expected": result.expected,
              "unit": result.unit, "details": result.details},
    )
