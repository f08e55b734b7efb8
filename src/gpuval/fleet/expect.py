"""What the SKU promises the fleet's tests, from its baseline (YAML, each figure with its source).

The bands, and the rule for N nodes:
- 1 node (the node test's in-node all_reduce): `allreduce_busbw_gbps`, the band `gpuval validate` judges by;
- N >= 2 nodes: `allreduce_busbw_<N>node_gbps` where the SKU file has one for that node count (ND96asr_v4: 2 nodes,
  188 GB/s, the AML_NCCL_Test guide), else `allreduce_busbw_multinode_gbps`, held at every node count (busbw is
  defined to be independent of the rank count);
- other collectives (sendrecv): no band is published; those figures are judged against the other pairs only.

A band is used only at the message size it was measured at: a test run at another size (--size) is judged against
its peers alone, never against a figure from another size. No baseline, or no band: `None`, "judged against the
other tests only" (the planner says so in its evidence).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuval.baselines import Band, Baseline
from gpuval.fleet.model import BusbwExpectation, Expect

ONE_NODE = "allreduce_busbw_gbps"
MULTI_NODE = "allreduce_busbw_multinode_gbps"
# Without a SKU band: 1 GiB, bandwidth-bound on every fabric (the AML_NCCL_Test guide's table: 97% of the 8 GiB figure).
DEFAULT_SIZE = 1024**3


def node_band_name(n_nodes: int) -> str:
    """The band name of an all_reduce over exactly `n_nodes` nodes."""
    return ONE_NODE if n_nodes == 1 else f"allreduce_busbw_{n_nodes}node_gbps"


def band_for(baseline: Baseline | None, collective: str, n_nodes: int) -> Band | None:
    """The band that judges `collective` over `n_nodes` nodes, or None."""
    if baseline is None or collective != "all_reduce":
        return None
    exact = baseline.band(node_band_name(n_nodes))
    if exact is not None or n_nodes == 1:
        return exact
    return baseline.band(MULTI_NODE)


@dataclass(frozen=True)
class TestSizes:
    """The message size of node tests (in-node) and of pair and group tests (across nodes), in bytes."""

    __test__ = False

    node: int
    multi: int


def message_sizes(baseline: Baseline | None, size: int | None = None) -> TestSizes:
    """--size for both, else the sizes the SKU's bands were measured at, else DEFAULT_SIZE."""
    if size is not None:
        return TestSizes(size, size)
    one = band_for(baseline, "all_reduce", 1)
    many = band_for(baseline, "all_reduce", 2)
    return TestSizes((one.size_bytes if one else None) or DEFAULT_SIZE,
                     (many.size_bytes if many else None) or DEFAULT_SIZE)


def expectation(baseline: Baseline | None, sizes: TestSizes) -> Expect | None:
    """The planner's Expect for tests run at `sizes`, or None when the baseline has no band for them."""
    if baseline is None:
        return None

    def expect(collective: str, n_nodes: int) -> BusbwExpectation | None:
        band = band_for(baseline, collective, n_nodes)
        size = sizes.node if n_nodes == 1 else sizes.multi
        if band is None or band.expected is None or (band.size_bytes and band.size_bytes != size):
            return None
        if band.fail_below is None and band.warn_below is None:
            return None
        limits = [f"{kind} limit: {source}" for kind, limit, source in (
            ("fail", band.fail_below, band.fail_source), ("warn", band.warn_below, band.warn_source))
            if limit is not None and source]
        source = "; ".join([f"{baseline.sku} {band.name}: {band.expected_source}", *limits])
        return BusbwExpectation(band, source)

    return expect
