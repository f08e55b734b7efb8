"""The nccl-tests result table as data: rows of out-of-place and in-place timings, in the `-J` shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Side:
    """One half of a row: time in microseconds, bandwidths in GB/s, wrong elements (None: not checked)."""

    time: float
    alg_bw: float
    bus_bw: float
    nwrong: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "alg_bw": self.alg_bw, "bus_bw": self.bus_bw, "nwrong": self.nwrong}


@dataclass(slots=True)
class Row:
    """One message size."""

    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: Side | None
    in_place: Side | None

    def sides(self) -> list[Side]:
        return [s for s in (self.out_of_place, self.in_place) if s is not None]

    def best_busbw(self) -> float:
        """The better of out-of-place and in-place bus bandwidth."""
        return max((s.bus_bw for s in self.sides()), default=0.0)

    def nwrong(self) -> float | None:
        """Wrong elements of both halves; None when neither was checked."""
        values = [s.nwrong for s in self.sides() if s.nwrong is not None]
        return sum(values) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_json() if self.out_of_place else None,
            "in_place": self.in_place.to_json() if self.in_place else None,
        }


@dataclass
class Table:
    """A whole test: its rows and footer, with what the header said."""

    collective: str | None = None
    nranks: int | None = None
    rows: list[Row] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    hosts: list[str] = field(default_factory=list)  # the ranks' hosts, rank 0's first (from the header's Rank lines)
    collective_inferred: bool = False  # the log named no collective: its columns proved this one

    def average_busbw(self) -> float:
        """nccl-tests' "Avg bus bandwidth": the mean busbw over every row, out-of-place and in-place."""
        values = [s.bus_bw for r in self.rows for s in r.sides()]
        return sum(values) / len(values) if values else 0.0

    def peak(self) -> Row | None:
        """The row with the highest bus bandwidth."""
        return max(self.rows, key=Row.best_busbw, default=None)

    def total_wrong(self) -> int:
        return int(sum(r.nwrong() or 0 for r in self.rows))
