"""Result records for tests, built one way: `record` for one, `records` for a node's set of one status each.

Every field has the value most tests need (a health record `ecc` of node n1, run r, ended now); a test names only
what it is about. `code` is the health record's fault code, `value` gives the record one metric named like the
record, `details` the health data's details (per-GPU rows under "gpus")."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuval.results.model import Metric, Result, Status, Where


def record(status: Status = Status.PASS, *, run: str = "r", name: str = "ecc", host: str = "n1",
           kind: str = "health", at: datetime | None = None, value: float | None = None, unit: str = "errors",
           code: str | None = None, sku: str | None = None, gpu_count: int = 0, reason: str = "",
           details: dict[str, Any] | None = None) -> Result:
    """One record, started and ended at `at` (default: now)."""
    when = at or datetime.now(timezone.utc)
    data: dict[str, Any] = {}
    if code is not None:
        data["fault_code"] = code
    if details:
        data["details"] = details
    return Result(run_id=run, kind=kind, name=name, where=Where(hostname=host, sku=sku, gpu_count=gpu_count),
                  status=status, started_at=when, finished_at=when, reason=reason, data=data,
                  metrics=[] if value is None else [Metric(name=name, value=value, unit=unit)])


def records(statuses: list[Status], *, run: str = "r", host: str = "n1", **fields: Any) -> list[Result]:
    """One record per status, named check0, check1, ... with the fault codes CODE0, CODE1, ... and the reason
    "<status> here"."""
    return [record(s, run=run, host=host, name=f"check{i}", code=f"CODE{i}", reason=f"{s.value} here", **fields)
            for i, s in enumerate(statuses)]
