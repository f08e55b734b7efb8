"""`-c` as nccl-tests checks, with real gloo ranks on the CPU (tests/helpers/forked_ranks.py: torchrun's environment,
forked from one import of torch): the same driver code NCCL ranks run.

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

import pytest

from tests.helpers import forked_ranks

RANKS = Path(__file__).with_name("gloo_ranks.py")


def _run(scenario: str, nprocs: int) -> list[dict]:
    proc = subprocess.run(forked_ranks.command(nprocs, RANKS, scenario), capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_check_launch_that_does_nothing_counts_wrong_elements(nprocs):
    lines = _run("noop", nprocs)
    assert len(lines) == 9 * 2  # every collective, out-of-place and in-place
    for line in lines:
        assert line["real_wrong"] == 0, line
        if line["collective"] == "scatter" and line["in_place"] and nprocs == 2:
            # in-place scatter: the root's own chunk is already in place; rank 1's is not
            assert line["noop_wrong"] > 0, line
        else:
            assert line["noop_wrong"] >= line["elements"] // nprocs, line


def test_float_avg_computed_as_nccl_does_is_right_on_three_ranks():
    """Three ranks: 1/3 rounds, so an exact comparison fails NCCL's own avg; nccl-tests' two-contributor pattern
    with 2 ulp passes it, for half, bfloat16, float and double."""
    lines = _run("premulsum", 3)
    assert [line["dtype"] for line in lines] == ["half", "bfloat16", "float", "double"]
    assert all(line["wrong"] == 0 and line["rows"] == 3 for line in lines), lines


def test_in_place_alltoall_and_sendrecv_on_one_buffer_are_not_checked():
    lines = _run("alias", 2)
    for line in lines:
        assert line["in_place"] == [None, None]  # printed N/A
        assert line["out_of_place"] == [0, 0]
        assert line["total"] == 0


def test_aggregated_launches_on_gloo_are_separate_calls():
    [line] = _run("aggregate", 2)
    assert line["all_reduce_calls"] == 2 * (1 + 4 * 3 + 1)
