"""Expected values per SKU, as the diagnosis takes them: a small interface any baseline source can fill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Expectation:
    """What a metric should read on a SKU: the expected value and the warn and fail thresholds.

    `size_bytes` names the message size a collective is judged at (never the average over sizes);
    `name` narrows it to one test (e.g. all_reduce)."""

    metric: str
    expected: float
    warn_at: float
    fail_at: float
    unit: str = ""
    kind: str = "collective"
    name: str | None = None
    size_bytes: int | None = None
    ranks: int | None = None  # a one-node collective baseline holds for that node's ranks only
    higher_is_better: bool = True
    source: str = ""

    def status_of(self, value: float) -> str:
        """'pass', 'warn' or 'fail' for a measured value."""
        worse = (lambda a, b: a < b) if self.higher_is_better else (lambda a, b: a > b)
        if worse(value, self.fail_at):
            return "fail"
        if worse(value, self.warn_at):
            return "warn"
        return "pass"


# Given a SKU (or None when a record does not say), the expectations that apply (empty: no baseline known).
ExpectationSource = Callable[[str | None], list[Expectation]]


def no_expectations(_sku: str | None) -> list[Expectation]:
    """The source to use when no baselines are available: nothing is judged against a baseline."""
    return []
