"""The suite's own order under pytest-xdist (tests/conftest.py `long_first`): the long tests lead the first worker's
share as xdist's worksteal scheduler cuts the shares, one after another; the rest keep the collection's order."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import long_first


@dataclass
class _Item:
    name: str
    long: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "long" and self.long else None


def _first_share(count: int, workers: int) -> int:
    """How many tests worksteal sends the first of its idle workers at the start: an even split."""
    return count // workers


def test_the_long_tests_lead_the_first_share_and_the_rest_keep_their_order():
    items = [_Item(f"t{i}", long=i in (40, 41, 97)) for i in range(100)]
    order = long_first(items, 3)
    assert sorted(i.name for i in order) == sorted(i.name for i in items)  # nothing lost, nothing twice
    assert [i.name for i in order[:3]] == ["t40", "t41", "t97"] and 3 < _first_share(100, 3)
    assert [i.name for i in order[3:]] == [i.name for i in items if not i.long]


def test_a_single_process_run_keeps_the_collection():
    items = [_Item(f"t{i}", long=i % 10 == 0) for i in range(30)]
    assert long_first(items, 0) is items and long_first(items, 1) is items
