"""The SKU's multi-node expectations as the planner gets them, and the message sizes they were measured at (host
lists: tests/engines/test_slurm_hostlist.py)."""

from __future__ import annotations

from gpuval.baselines import load_baseline
from gpuval.fleet.plan.expect import DEFAULT_SIZE, TestSizes, band_for, expectation, message_sizes

GIB = 1024**3


def test_ndv4_two_nodes_is_the_seed_figure_and_holds_at_n_nodes():
    base = load_baseline("Standard_ND96asr_v4")
    sizes = message_sizes(base)
    assert (sizes.node, sizes.multi) == (8 * GIB, 8 * GIB)
    expect = expectation(base, sizes)
    assert expect is not None
    one, two, many = expect("all_reduce", 1), expect("all_reduce", 2), expect("all_reduce", 64)
    assert (one.expected, one.fail_below) == (234.0, 228.0)  # the 1-node band validate judges by
    assert (two.expected, two.fail_below) == (188.0, 178.6) and "AML_NCCL_Test" in two.source
    assert (many.expected, many.fail_below) == (188.0, 178.6) and "independent of the rank count" in many.source
    assert expect("sendrecv", 2) is None  # nothing published: judged against the other pairs only


def test_h100_multi_node_and_its_size():
    base = load_baseline("Standard_ND96isr_H100_v5")
    expect = expectation(base, message_sizes(base))
    assert message_sizes(base).multi == 16 * GIB
    got = expect("all_reduce", 16)
    assert (got.expected, got.fail_below) == (450.0, 380.0) and "ai-infrastructure-on-azure" in got.source
    assert band_for(base, "all_reduce", 2).name == "allreduce_busbw_multinode_gbps"  # no 2-node figure: the rule


def test_a_band_is_never_used_at_another_size():
    base = load_baseline("Standard_ND96asr_v4")
    expect = expectation(base, message_sizes(base, 1024**2))
    assert expect("all_reduce", 2) is None and expect("all_reduce", 1) is None
    assert message_sizes(None) == TestSizes(DEFAULT_SIZE, DEFAULT_SIZE)
    nd40 = load_baseline("Standard_ND40rs_v2")  # a 1-node band at 8 GiB, no multi-node figure
    assert message_sizes(nd40) == TestSizes(8 * GIB, DEFAULT_SIZE)
    assert expectation(None, message_sizes(None)) is None
    assert expectation(nd40, message_sizes(nd40))("all_reduce", 2) is None
