"""`-c` as nccl-tests checks, with real gloo ranks on the CPU (tests/helpers/forked_ranks.py: torchrun's environment,
forked from one import of torch): the same driver code NCCL ranks run. One job of 2 ranks and one of 3 run the
scenarios below that need that many, one after another (gloo_ranks.py).

- a check launch that does nothing must count wrong elements, for every collective and side (stale data never
  passes);
- float avg computed NCCL's way (PreMulSum: x*T(1/n) per rank, then a sum) passes on 3 ranks;
- in-place alltoall and sendrecv aliased as on NCCL are N/A, never counted;
- -m on gloo issues its calls one after another (gloo has no coalesced group).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers import forked_ranks

RANKS = Path(__file__).with_name("gloo_ranks.py")
SCENARIOS = {2: ("noop", "alias", "aggregate"), 3: ("noop", "premulsum")}  # one job per number of ranks


@pytest.fixture(scope="module")
def lines() -> Callable[[int, str], list[dict]]:
    """A scenario's lines from the one job of its number of ranks (SCENARIOS), run when a test first asks for it."""
    jobs: dict[int, dict[str, list[dict]]] = {}

    def of(nprocs: int, scenario: str) -> list[dict]:
        if nprocs not in jobs:
            proc = subprocess.run(forked_ranks.command(nprocs, RANKS, *SCENARIOS[nprocs]), capture_output=True,
                                  text=True, timeout=280)
            assert proc.returncode == 0, proc.stderr[-3000:]
            jobs[nprocs] = {}
            for fields in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")):
                jobs[nprocs].setdefault(fields.pop("scenario"), []).append(fields)
        return jobs[nprocs].get(scenario, [])

    return of


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_check_launch_that_does_nothing_counts_wrong_elements(lines, nprocs):
    found = lines(nprocs, "noop")
    assert len(found) == 9 * 2  # every collective, out-of-place and in-place
    for line in found:
        assert line["real_wrong"] == 0, line
        if line["collective"] == "scatter" and line["in_place"] and nprocs == 2:
            # in-place scatter: the root's own chunk is already in place; rank 1's is not
            assert line["noop_wrong"] > 0, line
        else:
            assert line["noop_wrong"] >= line["elements"] // nprocs, line


def test_float_avg_computed_as_nccl_does_is_right_on_three_ranks(lines):
    """Three ranks: 1/3 rounds, so an exact comparison fails NCCL's own avg; nccl-tests' two-contributor pattern
    with 2 ulp passes it, for half, bfloat16, float and double."""
    found = lines(3, "premulsum")
    assert [line["dtype"] for line in found] == ["half", "bfloat16", "float", "double"]
    assert all(line["wrong"] == 0 and line["rows"] == 3 for line in found), found


def test_in_place_alltoall_and_sendrecv_on_one_buffer_are_not_checked(lines):
    found = lines(2, "alias")
    assert [line["collective"] for line in found] == ["alltoall", "sendrecv"]
    for line in found:
        assert line["in_place"] == [None, None]  # printed N/A
        assert line["out_of_place"] == [0, 0]
        assert line["total"] == 0


def test_aggregated_launches_on_gloo_are_separate_calls(lines):
    [line] = lines(2, "aggregate")
    assert line["all_reduce_calls"] == 2 * (1 + 4 * 3 + 1)
