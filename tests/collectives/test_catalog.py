"""busbw/algbw formulas and buffer counts against nccl-tests (doc/PERFORMANCE.md, src/*.cu), and size syntax."""

from __future__ import annotations

import pytest

from gpuval.collectives.catalog import COLLECTIVES, collective_named, dtype_named
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.collectives.nccltests_text import float_str
from gpuval.collectives.sizes import format_size, parse_size, sweep
from gpuval.errors import UsageError
from tests.conftest import DATA

# PERFORMANCE.md: busbw factor per collective for n ranks.
EXPECTED_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("nranks", [1, 2, 4, 8, 16, 1024])
def test_bus_factor_matches_performance_md(name, nranks):
    assert collective_named(name).bus_factor(nranks) == pytest.approx(EXPECTED_FACTOR[name](nranks))


@pytest.mark.parametrize(
    ("name", "count", "nranks", "send", "recv", "param", "algbw_bytes"),
    [
        # getCollByteCount of each src/<collective>.cu (nccl-tests v2.13+), for 1024 floats on 8 ranks
        ("all_reduce", 1024, 8, 1024, 1024, 1024, 4096),
        ("all_gather", 1024, 8, 128, 1024, 128, 4096),
        ("reduce_scatter", 1024, 8, 1024, 128, 128, 4096),
        ("alltoall", 1024, 8, 1024, 1024, 128, 4096),
        ("broadcast", 1024, 8, 1024, 1024, 1024, 4096),
        ("reduce", 1024, 8, 1024, 1024, 1024, 4096),
        ("sendrecv", 1024, 8, 1024, 1024, 1024, 4096),
        ("gather", 1024, 8, 128, 1024, 128, 4096),  # gather.cu: send = share, recv = share x n
        ("scatter", 1024, 8, 1024, 128, 128, 4096),  # scatter.cu: send = share x n, recv = share
        # each rank's share is aligned down to 16 bytes ((count/nranks) & -(16/eltSize)): 1000 floats on 8 ranks
        # give 125 per rank, aligned to 124; 1000 floats on 3 ranks give 333, aligned to 332
        ("all_gather", 1000, 8, 124, 992, 124, 3968),
        ("reduce_scatter", 1000, 3, 996, 332, 332, 3984),
        ("alltoall", 1000, 3, 996, 996, 332, 3984),
        ("gather", 1000, 3, 332, 996, 332, 3984),
        ("scatter", 1000, 3, 996, 332, 332, 3984),
    ],
)
def test_counts_and_bytes(name, count, nranks, send, recv, param, algbw_bytes):
    coll = collective_named(name)
    counts = coll.counts(count, nranks, 4)
    assert (counts.send, counts.recv, counts.param) == (send, recv, param)
    algbw, _ = coll.bandwidth(counts.param, 4, 1.0, nranks)
    assert algbw == pytest.approx(algbw_bytes / 1e9)


def test_alignment_depends_on_the_type_size():
    # 16 bytes: 16 int8, 8 half, 4 float, 2 double per alignment unit
    coll = collective_named("all_gather")
    assert [coll.counts(1000, 3, size).param for size in (1, 2, 4, 8)] == [320, 328, 332, 332]


def test_formula_reproduces_published_ndv4_table():
    """algbw = size / time and busbw = algbw * 2(n-1)/n reproduce every row of a real 8-GPU all_reduce log."""
    table = parse_text((DATA / "nccl-tests" / "ndv4-1node-allreduce.txt").read_text())[0]
    coll = collective_named("all_reduce")
    for row in table.rows[-12:]:  # large sizes: times are printed with enough digits to check to 0.5 %
        side = row.out_of_place
        algbw, busbw = coll.bandwidth(row.count, 4, side.time / 1e6, table.nranks)
        assert algbw == pytest.approx(side.alg_bw, rel=5e-3)
        assert busbw == pytest.approx(side.bus_bw, rel=5e-3)


def test_float_str_matches_nccl_tests_layout():
    # Values and widths as nccl-tests v2.17+ prints them (src/util.cu getFloatStr): two decimals while they fit.
    assert float_str(18.75, 7) == "  18.75"
    assert float_str(1157.6, 7) == "1157.60"
    assert float_str(16274.0, 7) == "16274.0"
    assert float_str(123456.0, 7) == " 123456"
    assert float_str(234.15, 6) == "234.15"
    assert float_str(1234.5, 6) == "1234.5"
    assert float_str(0.0, 6) == "  0.00"
    assert float_str(12345678.0, 7) == "1.2e+07"


@pytest.mark.parametrize(("text", "value"), [("8", 8), ("1K", 1024), ("128M", 128 * 2**20), ("8G", 8 * 2**30),
                                             ("64k", 65536), ("1GB", 2**30), ("2GiB", 2 * 2**30)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "1X", "M", "-5", "1.5G", "12 34"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="bad size"):
        parse_size(text)


def test_sweep_factor_and_increment():
    assert sweep(8, 64, 2) == [8, 16, 32, 64]
    assert sweep(8, 100, 2) == [8, 16, 32, 64]
    assert sweep(1024**2, 3 * 1024**2, 1, 1024**2) == [1024**2, 2 * 1024**2, 3 * 1024**2]
    assert sweep(32, 32) == [32]
    assert format_size(8 * 2**30) == "8G" and format_size(1000) == "1000"


def test_sweep_rejects_min_above_max():
    with pytest.raises(UsageError, match="above maximum"):
        sweep(1024, 8, 2)


def test_dtype_aliases():
    assert dtype_named("fp16").name == "half"
    assert dtype_named("bf16").name == "bfloat16"
    with pytest.raises(UsageError, match="unknown data type"):
        dtype_named("float8")
