"""The SKU's multi-node expectations as the planner gets them, the message sizes they were measured at, and host
lists both ways (the Slurm syntax the check reads and writes)."""

from __future__ import annotations

import pytest

from gpuval.baselines import load_baseline
from gpuval.errors import UsageError
from gpuval.workloads.fleet.expect import DEFAULT_SIZE, TestSizes, band_for, expectation, message_sizes
from gpuval.workloads.fleet.hostlist import compress, expand

GIB = 1024**3


def test_ndv4_two_nodes_is_the_seed_figure_and_holds_at_n_nodes():
    base = load_baseline("Standard_ND96asr_v4")
    sizes = message_sizes(base)
    assert (sizes.node, sizes.multi) == (8 * GIB, 8 * GIB)
    expect = expectation(base, sizes)
    assert expect is not None
    one, two, many = expect("all_reduce", 1), expect("all_reduce", 2), expect("all_reduce", 64)
    assert (one.expected, one.fail_below) == (234.0, 228.0)  # the 1-node band validate judges by
    assert (two.expected, two.fail_below) == (188.0, 178.6) and "seed 002" in two.source
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


@pytest.mark.parametrize("text,hosts", [
    ("n1", ["n1"]), ("n[1-3]", ["n1", "n2", "n3"]), ("gpu-[08-10],m7", ["gpu-08", "gpu-09", "gpu-10", "m7"]),
    ("n[1,3-4],n1", ["n1", "n3", "n4"]),
])
def test_host_lists_expand(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize("bad", ["", "n[3-1]", "n[a-b]", "n;rm", "n[1-2", "n[1-2000000]"])
def test_bad_host_lists_are_one_line_errors(bad):
    with pytest.raises(UsageError):
        expand(bad)


def test_compress_is_the_inverse_and_keeps_padding():
    hosts = [f"gpu-{i:03d}" for i in (1, 2, 3, 5, 10, 11)] + ["login", "n9", "n10"]
    text = compress(hosts)
    assert text == "login,gpu-[001-003,005,010-011],n[9-10]"
    assert sorted(expand(text)) == sorted(hosts)
    assert compress(expand("node[0001-4096]")) == "node[0001-4096]"
