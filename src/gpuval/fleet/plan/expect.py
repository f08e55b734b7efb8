"""What the SKU promises the fleet's tests, from its baseline (YAML, each figure with its source).

An all_reduce over N nodes is judged by the band of THE all_reduce rule, `Baseline.allreduce_band(N, ranks)`: one
rank per GPU of every node (a test of other ranks is another measurement), the 1-node band for the node test's
in-node all_reduce, `allreduce_busbw_<N>node_gbps` or else `allreduce_busbw_multinode_gbps` across nodes. Other
collectives (sendrecv): no band is published; those figures are judged against the other pairs only.

A band is used only at the message size it was measured at: a test run at another size (--size) is judged against
its peers alone, never against a figure from another size. No baseline, or no band: `None`, "judged against the
other tests only" (the planner says so in its evidence).

An NVL72 rack's all_reduce (racks.py) has a band of its own, `nvl_domain_allreduce_busbw_gbps` (one rank per GPU of
every tray of one NVLink domain, MNNVL and NVLS), with the trays a domain holds (`fabric: {nvl_domain_trays: 18}`):
`rack_spec`. It runs at that band's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuval.baselines import ALLREDUCE_DEFAULT_BYTES, Band, Baseline, allreduce_size
from gpuval.fleet.plan.racks_book import RACK_PURPOSES, RackSpec
from gpuval.fleet.plan.terms import BusbwExpectation, Expect

DEFAULT_SIZE = ALLREDUCE_DEFAULT_BYTES  # without a SKU band
RACK_BAND = "nvl_domain_allreduce_busbw_gbps"  # an NVL72 rack's all_reduce over its NVLink domain


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
    rack: int | None = None  # an NVL72 rack's all_reduce [default: multi]

    def of(self, test_kind: str, purpose: str) -> int:
        """The size a test runs at: a node test's, a rack's (racks_book.RACK_PURPOSES), any other's."""
        if test_kind == "node":
            return self.node
        return self.rack if self.rack and purpose in RACK_PURPOSES else self.multi


def message_sizes(baseline: Baseline | None, size: int | None = None, ranks: TestRanks | None = None) -> TestSizes:
    """--size for both, else the sizes the SKU's bands for these ranks were measured at, else DEFAULT_SIZE."""
    if size is not None:
        return TestSizes(size, size)
    ranks = ranks or one_per_gpu(baseline)
    rack = _rack_band(baseline, ranks)
    return TestSizes(allreduce_size(baseline, 1, ranks.of(1)), allreduce_size(baseline, 2, ranks.of(2)),
                     int(rack.size_bytes) if rack is not None and rack.size_bytes else None)


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
        return BusbwExpectation(band, _source(baseline, band))

    return expect


def _source(baseline: Baseline, band: Band) -> str:
    limits = [f"{kind} limit: {source}" for kind, limit, source in (
        ("fail", band.fail_below, band.fail_source), ("warn", band.warn_below, band.warn_source))
        if limit is not None and source]
    return "; ".join([f"{baseline.sku} {band.name}: {band.expected_source}", *limits])


def _rack_band(baseline: Baseline | None, ranks: TestRanks) -> Band | None:
    """The rack band where it judges these ranks (one per GPU of every tray) and has a figure and a limit."""
    band = baseline.bands.get(RACK_BAND) if baseline is not None else None
    if band is None or band.expected is None or (band.fail_below is None and band.warn_below is None):
        return None
    gpus = baseline.gpus if baseline is not None else None
    return band if gpus is None or ranks.per_node == gpus else None


def rack_spec(baseline: Baseline | None, sizes: TestSizes, ranks: TestRanks | None = None) -> RackSpec:
    """What the baseline says of NVL72 racks: the trays of a domain (`fabric.nvl_domain_trays`) and the rack band at
    the size the rack tests run at (None at another size, or for other ranks)."""
    raw = (baseline.raw.get("fabric") if baseline is not None else None) or {}
    trays = raw.get("nvl_domain_trays")
    band = _rack_band(baseline, ranks or one_per_gpu(baseline))
    size = sizes.rack or sizes.multi
    if band is None or baseline is None or (band.size_bytes and band.size_bytes != size):
        return RackSpec(trays=trays if type(trays) is int and trays > 1 else None)
    return RackSpec(trays=trays if type(trays) is int and trays > 1 else None,
                    band=BusbwExpectation(band, _source(baseline, band)))
