"""What to read from the store: a filter on runs, hosts, kinds and time, and the run summaries it lists."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from gpuval.errors import UsageError
from gpuval.results.model import Status, worst_status

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """'7d', '12h', '2w', '30m' before now, or an ISO date/time (UTC unless it says otherwise)."""
    now = now or datetime.now(timezone.utc)
    match = _RELATIVE.match(text)
    if match:
        try:
            return now - timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
        except OverflowError:  # 9999999d: before year 1
            raise UsageError(f"bad time {text!r}: that age reaches before the calendar starts") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"bad time {text!r}: use an ISO date (2025-06-01, 2025-06-01T12:00) or an age "
                         "such as 30m, 12h, 7d, 2w") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


@dataclass
class Query:
    """A filter on stored records; every field left empty matches everything."""

    run_ids: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    skus: list[str] = field(default_factory=list)
    since: datetime | None = None
    until: datetime | None = None
    status: Status | None = None


@dataclass
class RunSummary:
    """One run as `gpuval history` lists it."""

    run_id: str
    started_at: datetime
    finished_at: datetime
    records: int
    hosts: int
    kinds: list[str]
    skus: list[str]
    status_counts: dict[str, int]

    @property
    def verdict(self) -> Status:
        """The run's verdict over its records' statuses, by THE node verdict's rule (results.verdict)."""
        return worst_status(Status(s) for s in self.status_counts)

    def to_json(self) -> dict:
        return {
            "run_id": self.run_id, "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(), "records": self.records, "hosts": self.hosts,
            "kinds": self.kinds, "skus": self.skus, "status_counts": self.status_counts,
            "verdict": self.verdict.value,
        }


@dataclass
class MetricPoint:
    """One metric of one record, for trends and noise: which host, which run, when, at which size."""

    hostname: str
    run_id: str
    started_at: datetime
    kind: str
    name: str
    metric: str
    value: float | None
    unit: str
    size_bytes: int | None
