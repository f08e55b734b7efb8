"""What a job prints is bounded (reliability-4 D10, D12): a `world` its records or its ranks claim is never counted
up to, thousands of stragglers cost linear time, and a rank that claims a host outside the job nominates no node and
stores no record (it is a note). Pure functions on records and probes built to a plan, as tests/diagnosis's others
(tests/diagnosis/test_straggler.py's windows, test_hang.py's probes)."""

from __future__ import annotations

import time
import tracemalloc

from gpuval.diagnosis.hang import find_hang
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.hooks.record import StepRecord
from tests.diagnosis.test_hang import _on_nodes, _probe
from tests.diagnosis.test_straggler import NODES, _window

BILLION = 10**9


def _claiming(world: int, records: list[StepRecord]) -> list[StepRecord]:
    return [StepRecord(**{**r.__dict__, "world": world}) for r in records]


def test_d10_a_world_of_a_billion_in_30_records_costs_no_memory():
    """reliability-4: 30 step records claiming `"world": 1000000000` were a MemoryError (set(range(world)) per
    window); a hang with one probed rank built a row per missing rank up to `world`. Both now find the ranks
    below `world` that nobody saw from the ranks seen, and say them as one run."""
    records = _claiming(BILLION, [r for w in range(3) for r in _window(10, w, {r: 0.1 for r in range(10)})])
    probes = _on_nodes(*(_probe(r, 9, 8, world=BILLION) for r in range(4)))
    tracemalloc.start()
    try:
        straggler = find_stragglers(records, NODES)
        hang = find_hang(probes, world=BILLION, node_of={5: "node-2"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # under a MiB, where a set of range(10**9) is tens of GB
    assert "rank(s) 10-999999999 missing from some windows" in straggler.notes[0]
    assert hang.outcome == "hang" and [(r.rank, r.node) for r in hang.waited_for] == [(5, "node-2")]
    assert "rank(s) 4-999999999 have no state on any node" in hang.reason


def test_d10_thousands_of_stragglers_take_linear_time():
    """reliability-4: 2N+1 ranks of which N compute longer took 22 s at N=2000 (every straggler rescanned every
    window's rows). Each straggler is now looked up by rank in its windows: N=2000 takes a fraction of a second
    of this process's CPU time."""
    slow = 2000
    records = [r for w in range(4) for r in _window(2 * slow + 1, w, {
        r: 0.15 if r % 2 else 0.10 for r in range(2 * slow + 1)})]
    started = time.process_time()
    report = find_stragglers(records)
    spent = time.process_time() - started
    assert report.outcome == "straggler" and len(report.stragglers) == slow
    assert spent < 1.0, spent
    assert report.reason.startswith("straggler(s): rank(s) 1, 3, 5, ") and "and 1968 more" in report.reason
