"""THE collective Result factory: a sweep's table as a Result record, for `gpuval bench` (rank 0), the nccl job's
reader and `gpuval import` alike. `where` is always given: this factory never asks which machine it runs on."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpuval.collectives.table import Table
from gpuval.results import Metric, Result, Status, Where

UNKNOWN = "unknown"  # the name of a sweep whose log named no collective and whose table proved none
NOT_JUDGED = "not judged: the log names no collective and its table does not prove one (nccl-tests before 2.17.4 " \
             "prints no name)"


def sweep_metrics(table: Table) -> list[Metric]:
    """A sweep's figures: average, peak and largest-size bandwidth, wrong elements."""
    metrics = [Metric(name="avg_busbw", value=table.average_busbw(), unit="GB/s")]
    peak = table.peak()
    if peak:
        metrics.append(Metric(name="peak_busbw", value=peak.best_busbw(), unit="GB/s", size_bytes=peak.size))
        last = table.rows[-1]
        metrics.append(Metric(name="busbw", value=last.best_busbw(), unit="GB/s", size_bytes=last.size))
        metrics.append(Metric(name="algbw", value=max((s.alg_bw for s in last.sides()), default=0.0), unit="GB/s",
                              size_bytes=last.size))
    metrics.append(Metric(name="wrong_elements", value=table.total_wrong(), unit="elements"))
    return metrics


def collective_record(table: Table, where: Where, run_id: str, params: dict[str, Any], started: datetime,
                      reason: str = "", hosts: list[str] | None = None, finished: datetime | None = None) -> Result:
    """The Result of one sweep: FAIL on any wrong element, ERROR with `reason` when the run could not finish,
    SKIPPED (not judged, never PASS) when nothing says which collective it was, else PASS.
    `hosts`: the job's hosts (default: the table's, else `where`'s)."""
    wrong = table.total_wrong()
    if reason:
        status = Status.ERROR
    elif wrong:
        status, reason = Status.FAIL, f"{wrong} wrong elements: the collective returned incorrect data"
    elif table.collective is None:
        status, reason = Status.SKIPPED, NOT_JUDGED
    else:
        status = Status.PASS
    return Result(
        run_id=run_id, kind="collective", name=table.collective or UNKNOWN, started_at=started,
        finished_at=finished or datetime.now(timezone.utc), where=where, params=params, metrics=sweep_metrics(table),
        status=status, reason=reason,
        data={"results": [r.to_json() for r in table.rows], "hosts": hosts or table.hosts or [where.hostname]},
    )
