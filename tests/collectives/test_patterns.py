"""The `-c` data (collectives.patterns): exact in every type, varying by element index, rank and repetition.

Every reduction is checked by brute force over the ranks (the closed-form expected value against the ranks' real
inputs reduced in the type), float avg against NCCL's PreMulSum in several summation orders, and the
values against displacement by any number of elements and against data of another repetition.
"""

from __future__ import annotations

import pytest
import torch

from gpuval.collectives.catalog import DTYPES, dtype_named
from gpuval.collectives.patterns import CHUNK, TIMED_REP, Patterns, Spec, is_float, sentinel, top

CPU = torch.device("cpu")
LENGTH = 5000


def _patterns(dtype: str, op: str, nranks: int) -> Patterns:
    return Patterns(Spec(dtype_named(dtype), op, nranks), CPU)


def _inputs(pat: Patterns, start: int, rep: int) -> torch.Tensor:
    """Every rank's input as the collective's type, [nranks, LENGTH]."""
    rows = [pat.reduce_input(start, LENGTH, r, rep).to(pat.tdtype, copy=True) for r in range(pat.spec.nranks)]
    return torch.stack(rows)


def _reduce_in_type(op: str, data: torch.Tensor, order: list[int]) -> torch.Tensor:
    acc = data[order[0]].clone()
    for r in order[1:]:
        acc = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum,
               "max": torch.maximum}[op](acc, data[r])
    return acc


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 8, 24, 160])
def test_every_reduction_is_exact_in_its_type(dtype, op, nranks):
    pat = _patterns(dtype, op, nranks)
    start, rep = 12345, 3
    data = _inputs(pat, start, rep)
    assert (data >= 0).all() and (data <= top(pat.spec.dtype)).all()
    expected = pat.reduce_expected(start, LENGTH, rep).to(pat.tdtype, copy=True)
    forward, backward = list(range(nranks)), list(reversed(range(nranks)))
    if op == "avg" and is_float(pat.spec.dtype):
        tmul = torch.float64 if dtype == "double" else torch.float32
        scaled = (data.to(tmul) * torch.tensor(1.0 / nranks, dtype=tmul)).to(pat.tdtype)  # NCCL: x * T(1/n)
        for order in (forward, backward, forward[1:] + forward[:1]):
            got = _reduce_in_type("sum", scaled, order)
            assert int(pat.wrong(got, lambda s, n: pat.reduce_expected(s, n, rep), start, tolerant=True)) == 0
        return
    for order in (forward, backward):
        got = _reduce_in_type(op, data, order)
        if op == "avg":  # integer types: the sum, then NCCL's truncating division
            got = torch.div(got, nranks, rounding_mode="trunc")
        assert torch.equal(got, expected), (dtype, op, nranks)
    if nranks > 1 and op != "min":  # a collective that returns a rank's own input unchanged is caught
        assert (data[0] != expected).float().mean() > 0.2


def test_float_avg_on_three_ranks_is_not_exact_but_within_two_ulp():
    """Why the tolerance: 1/3 rounds, so NCCL's result differs from the exact average on many elements."""
    pat = _patterns("float", "avg", 3)
    data = _inputs(pat, 0, 1).to(torch.float64)
    exact = (data.sum(0) / 3).to(torch.float32)
    nccl = _reduce_in_type("sum", (data.to(torch.float32) * torch.tensor(1 / 3, dtype=torch.float32)), [0, 1, 2])
    assert (nccl != exact).any()
    assert int(pat.wrong(nccl, lambda s, n: pat.reduce_expected(s, n, 1), 0, tolerant=True)) == 0
    assert int(pat.wrong(nccl * 1.001, lambda s, n: pat.reduce_expected(s, n, 1), 0, tolerant=True)) == LENGTH


@pytest.mark.parametrize("dtype", ["int8", "uint8", "bfloat16", "half", "float"])
@pytest.mark.parametrize("shift", [1, 16, 32, 64, 128, 256, 4096, CHUNK])
def test_data_displaced_by_any_number_of_elements_is_wrong(dtype, shift):
    """The old pattern repeated every 16 elements: a chunk landing 16, 32 ... elements off was invisible."""
    pat = _patterns(dtype, "sum", 4)
    here = pat.movement(0, LENGTH, 1).clone()
    there = pat.movement(shift, LENGTH, 1)
    assert (here != there).float().mean() > 0.9
    values = pat.reduce_input(0, LENGTH, 2, 1).clone()
    assert (values != pat.reduce_input(shift, LENGTH, 2, 1)).float().mean() > 0.4


def test_each_repetition_and_rank_has_its_own_data():
    pat = _patterns("bfloat16", "sum", 8)
    timed = pat.movement(0, LENGTH, TIMED_REP).clone()
    assert (timed != pat.movement(0, LENGTH, 1)).float().mean() > 0.9
    assert (pat.movement(0, LENGTH, 1).clone() != pat.movement(0, LENGTH, 2)).float().mean() > 0.9
    rank0 = pat.reduce_input(0, LENGTH, 0, 1).clone()
    assert (rank0 != pat.reduce_input(0, LENGTH, 1, 1)).all()  # positions differ by one on every element
    assert (rank0 != pat.reduce_input(0, LENGTH, 0, 2)).float().mean() > 0.5


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_no_pattern_value_is_the_sentinel(dtype):
    pat = _patterns(dtype, "max", 4)
    empty = pat.empty(10)
    assert (empty.to(torch.int64) == sentinel(pat.spec.dtype)).all()
    moved = pat.movement(0, LENGTH, 1).to(pat.tdtype)
    assert not (moved == empty[0]).any()
    assert not (pat.reduce_expected(0, LENGTH, 1).to(pat.tdtype) == empty[0]).any()


def test_buffers_longer_than_a_chunk_are_written_and_checked_whole():
    pat = _patterns("int8", "sum", 2)
    buf = pat.empty(CHUNK + 77)
    pat.move(buf, 10, 5)
    assert int(pat.moved_wrong(buf, 10, 5)) == 0
    buf[CHUNK + 5] += 1
    buf[3] += 1
    assert int(pat.moved_wrong(buf, 10, 5)) == 2
    assert int(pat.moved_wrong(buf, 10, 6)) > CHUNK * 0.9  # another repetition's data
