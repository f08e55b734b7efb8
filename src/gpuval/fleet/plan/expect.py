"""What the SKU promises the fleet's tests, from its baseline (YAML, each figure with its source).

An all_reduce over N nodes is judged by the band of THE all_reduce rule, `Baseline.allreduce_band(N, ranks)`: one
rank per GPU of every node (a test of other ranks is another measurement), the 1-node band for the node test's
in-node all_reduce, `allreduce_busbw_<N>node_gbps` or else `allreduce_busbw_multinode_gbps` across nodes. Other
collectives (sendrecv): no band is published; those figures are judged against the other pairs only.

A band is used only at the message size it was measured at: a test run at another size (--size) is judged against
its peers alone, never against a figure from another size. No baseline, or no band: `None`, "judged against the
other tests only" (the planner says so in its evidence).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuval.baselines import ALLREDUCE_DEFAULT_BYTES, Band, Baseline, allreduce_size
from gpuval.fleet.plan.terms import BusbwExpectation, Expect

DEFAULT_SIZE = ALLREDUCE_DEFAULT_BYTES  # without a SKU band


@dataclass(frozen=True)
class TestRanks:
    """The ranks of the tests: of a node test's in-node all_reduce, and per node of pair and group tests (None:
    not known)."""

    __test__ = False

    node: int | None
    per_node: int | None

    def of(self, n_nodes: int) -> int | None:
        """The ranks of a test over `n_nodes` nodes."""
        if n_nodes == 1:
            return self.node
        return n_nodes * self.per_node if self.per_node else None


def one_per_gpu(baseline: Baseline | None) -> TestRanks:
    """The fleet's default ranks: one per GPU of the SKU's nodes."""
    gpus = baseline.gpus if baseline is not None else None
    return TestRanks(gpus, gpus)


def band_for(baseline: Baseline | None, collective: str, n_nodes: int, ranks: TestRanks | None = None) -> Band | None:
    """The band that judges `collective` over `n_nodes` nodes with these ranks [default: one per GPU], or None."""
    if baseline is None or collective != "all_reduce":
        return None
    return baseline.allreduce_band(n_nodes, (ranks or one_per_gpu(baseline)).of(n_nodes))


@dataclass(frozen=True)
class TestSizes:
    """The message size of node tests (in-node) and of pair and group tests (across nodes), in bytes."""

    __test__ = False

    node: int
    multi: int


def message_sizes(baseline: Baseline | None, size: int | None = None, ranks: TestRanks | None = None) -> TestSizes:
    """--size for both, else the sizes the SKU's bands for these ranks were measured at, else DEFAULT_SIZE."""
    if size is not None:
        return TestSizes(size, size)
    ranks = ranks or one_per_gpu(baseline)
    return TestSizes(allreduce_size(baseline, 1, ranks.of(1)), allreduce_size(baseline, 2, ranks.of(2)))


def expectation(baseline: Baseline | None, sizes: TestSizes, ranks: TestRanks | None = None) -> Expect | None:
    """The planner's Expect for tests run at `sizes` with these ranks [default: one per GPU], or None when the
    baseline has no band for them."""
    if baseline is None:
        return None
    ranks = ranks or one_per_gpu(baseline)

    def expect(collective: str, n_nodes: int) -> BusbwExpectation | None:
        band = band_for(baseline, collective, n_nodes, ranks)
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
