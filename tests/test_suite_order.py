"""The suite's own order under pytest-xdist (tests/conftest.py `long_first`): each long test leads a worker's share
as xdist's worksteal scheduler cuts the shares, and the order is otherwise the collection's."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import long_first


@dataclass
class _Item:
    name: str
    long: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "long" and self.long else None


def _shares(count: int, workers: int) -> list[range]:
    """The consecutive shares worksteal sends its idle workers at the start: the rest split evenly each time."""
    shares, start = [], 0
    for k in range(workers):
        size = (count - start) // (workers - k)
        shares.append(range(start, start + size))
        start += size
    return shares


def test_each_long_test_leads_a_share_and_the_rest_keep_their_order():
    items = [_Item(f"t{i}", long=i in (40, 41, 97)) for i in range(100)]
    order = long_first(items, 3)
    assert sorted(i.name for i in order) == sorted(i.name for i in items)  # nothing lost, nothing twice
    assert [order[s.start].name for s in _shares(100, 3)] == ["t40", "t41", "t97"]
    rest = [i.name for i in order if not i.long]
    assert rest == [i.name for i in items if not i.long]


def test_more_long_tests_than_workers_go_round_and_a_single_process_run_keeps_the_collection():
    items = [_Item(f"t{i}", long=i % 10 == 0) for i in range(30)] + [_Item("u")]
    order = long_first(items, 2)
    first, second = _shares(31, 2)
    assert [i.name for i in order[first.start:first.start + 2]] == ["t0", "t20"]
    assert order[second.start].name == "t10" and len(order) == 31
    assert long_first(items, 0) is items and long_first(items, 1) is items
