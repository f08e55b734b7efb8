"""What the fleet planner hands out and takes back: tests, rounds, results, expectations, evidence and verdicts.

Plain frozen dataclasses, no engine and no I/O: the wiring step turns a Round into engine jobs and the jobs'
records back into TestResults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from statistics import fmean
from typing import Any, Callable, Literal, Mapping

from gpuval.baselines import Band
from gpuval.diagnosis import stats
from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause

TestKind = Literal["node", "pair", "group"]
CENTRE_PURPOSES = ("suite", "screen")  # the tests that sample the fleet without aiming at anyone (weighing.py)

# What each kind runs. A node test is the health suite plus the in-node all_reduce (its busbw is judged here; the
# suite's verdict, judged from the health records the node printed, comes back in TestResult.health). A pair runs
# the 2-node all_reduce and sendrecv: all_reduce loads every NIC of both nodes, sendrecv is the plain point-to-point
# path, and both are limited by the slower node and by the link between them. A group is the all_reduce at its node
# count.
COLLECTIVES: dict[str, tuple[str, ...]] = {
    "node": ("all_reduce",),
    "pair": ("all_reduce", "sendrecv"),
    "group": ("all_reduce",),
}


@dataclass(frozen=True)
class Test:
    """One test of a round: which nodes, what to run, how many measurements of each collective, and why.

    `samples` is the number of measurements per collective at the largest message size (nccl-tests `-N` cycles);
    the planner asks for more samples where one noisy figure must not decide (re-tests), see FleetConfig.
    `purpose`: suite (round 0), rerun (node suite again), screen (first pair), retest (a suspect with a known-good
    partner), cross (two cleared nodes under different switches), link (a suspect link, its two cleared ends
    again), scale (the full-scale all_reduce), bisect (one half of a slow group).
    """

    __test__ = False  # not a pytest class, despite its name

    id: str
    kind: TestKind
    nodes: tuple[str, ...]
    samples: int
    purpose: str
    settle_s: float = 0.0  # seconds to wait before it is sent: a node test re-run once NVLink settled after a boot

    @property
    def collectives(self) -> tuple[str, ...]:
        """The collectives this test runs, each `samples` times."""
        return COLLECTIVES[self.kind]


@dataclass(frozen=True)
class Round:
    """Tests that share no node, so they can run at the same time (one engine job or several)."""

    index: int
    tests: tuple[Test, ...]

    @property
    def nodes(self) -> frozenset[str]:
        """Every node this round uses."""
        return frozenset(n for t in self.tests for n in t.nodes)


@dataclass(frozen=True)
class Measured:
    """One figure of a node's health suite: its unit, and each value with who measured it ("GPU 3 (00000004:00:00.0)",
    "GPU 3 (...) alone", a GPU pair "1<-0", an HCA "mlx5_0", "" the node itself)."""

    unit: str
    values: tuple[tuple[str, float], ...]

    def node_figure(self) -> float | None:
        """The node's figure: the mean of its values that are figures (is_figure); None when none is."""
        usable = [v for _, v in self.values if is_figure(v)]
        return fmean(usable) if usable else None


@dataclass(frozen=True)
class NodeFigures:
    """A node test's figures from its health suite (fleet/run/figures.py reads them from the health records the node
    printed): the GPU model they were measured on (several models joined with " + ": compared only with nodes of the
    same mix) and each figure by name (its band's metric and how it was measured: "gemm_fp16_tflops")."""

    model: str
    figures: Mapping[str, Measured]

    @cached_property
    def means(self) -> dict[str, float]:
        """Each figure's node figure (figures with no usable value left out): worked out once, read by the fleet's
        figures, the judgement and the evidence."""
        out = {name: m.node_figure() for name, m in self.figures.items()}
        return {name: v for name, v in out.items() if v is not None}

    def to_json(self) -> dict[str, Any]:
        """For a test record's data: the model, and each figure's unit and values."""
        return {"model": self.model, "figures": {name: {"unit": m.unit, "values": [list(v) for v in m.values]}
                                                 for name, m in self.figures.items()}}


MAX_FIGURE = 1e7  # TFLOPS, GB/s, Gb/s: ten exaflops or petabytes a second is no GPU's figure (and keeps sums finite)


def is_figure(value: float) -> bool:
    """A value that can judge: finite, not negative (no throughput is under nothing) and under MAX_FIGURE."""
    return math.isfinite(value) and 0.0 <= value <= MAX_FIGURE


@dataclass(frozen=True)
class TestResult:
    """What came back from one test.

    busbw: collective -> the measured busbw samples in GB/s (unrounded). error: the test ran and failed (crash,
    hang, timeout, wrong results): evidence against its nodes or link. blame: the nodes the error is attributed to,
    when the engine can tell (reported, never used to convict: a hang on a pair says nothing about which end).
    not_run: the test could not run for a reason that is not its nodes (engine refused, quota, image pull):
    never a hardware verdict. health / health_reason: a node test's health-suite verdict (THE node verdict over the
    health records the node printed, judged where the check runs: lines.RoundReader.result). gpus: a node test's
    figures from those records (judged against the fleet's nodes of its GPU model: node_figures.py), None when its
    suite measured none.
    """

    __test__ = False

    test_id: str
    busbw: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None
    blame: tuple[str, ...] = ()
    not_run: str | None = None
    health: Status | None = None
    health_reason: str = ""
    # A node test's: the NVLink domain its GPUs registered into ("ClusterUUID.CliqueId", from its fabric check's
    # record; None: none read), seconds since the node booted, its failed checks' fault codes.
    domain: str | None = None
    uptime_s: float | None = None
    health_codes: tuple[str, ...] = ()
    nvlink: "NvlinkProof | None" = None  # a rack test's: what NCCL's log says its ranks used (None: not read)

    gpus: NodeFigures | None = None

@dataclass(frozen=True)
class NvlinkProof:
    """What NCCL's own log (NCCL_DEBUG=INFO, collectives.nccl_debug) says a rack test's ranks used: of `ranks` ranks
    whose log was read, how many communicators said `MNNVL 1`, how many showed NVLS (multicast available or
    connected), how many GPUs NCCL found in no NVLink domain (`fabric UUID 0.0 cliqueId 0x0`); `evidence`: a line
    that shows a fall back ("" when none)."""

    ranks: int
    mnnvl: int
    nvls: int
    unregistered: int = 0
    evidence: str = ""

    @property
    def fell_back(self) -> bool:
        """Whether some rank did not use multi-node NVLink with NVLS (or ran in no NVLink domain)."""
        return self.unregistered > 0 or self.mnnvl < self.ranks or self.nvls < self.ranks


@dataclass(frozen=True)
class BusbwExpectation:
    """What the SKU promises for one collective at one node count: its band (busbw in GB/s, judged through the one
    judge, `baselines.noisy.judge_mean`), and where the figures come from."""

    band: Band
    source: str = ""

    @classmethod
    def limits(cls, expected: float, fail_below: float | None = None, warn_below: float | None = None,
               source: str = "") -> "BusbwExpectation":
        """An expectation from bare figures (a simulated SKU, a test)."""
        return cls(Band("busbw_gbps", "GB/s", expected, source, warn_below=warn_below,
                        fail_below=fail_below), source)

    @property
    def expected(self) -> float:
        """The figure the SKU promises (an expectation always has one: see expect.expectation)."""
        return float(self.band.expected or 0.0)

    @property
    def fail_below(self) -> float | None:
        """The band's fail limit, or None: a band with only a warn limit never fails a node."""
        return self.band.fail_below


# (collective, node count) -> the expectation, or None: then a test is judged against the other tests only.
Expect = Callable[[str, int], "BusbwExpectation | None"]


@dataclass(frozen=True)
class FleetConfig:
    """The planner's knobs; the defaults are what the tests and benchmarks/fleet_isolation.py prove.

    cut: the shortfall (fraction under the reference) judged slow. The issue calls a node 5-30% under slow; 3%
    sits between that and the healthy spread of a couple of percent, so a 5% node is still caught after noise.
    z: how many standard errors beyond the cut a shortfall must be to count as a failure: stats.OUTLIER_Z (3.5),
    the robust outlier cut the rest of gpuval uses. One-sided, noise alone reaches it in about one test in 4,300;
    a conviction needs two such failures with different known-good partners, so noise alone practically never
    convicts even over 16,384 nodes. clear_z: standard errors inside the cut for a pass, 2: a pass clears every
    member, so a slow node that passes by luck is missed; at 3% noise a node 5% slow passes its screen (16
    samples) about once in 20,000, and healthy pairs are rarely suspected for noise alone.
    suite_samples / screen_samples / retest_samples: measurements per collective in the node suite (cheap: no
    network), the screening pairs, and re-tests (4x the screen: half the noise).
    max_samples: the most measurements per collective a pair test is given where the fleet's measured per-sample
    noise calls for more than the configured ones (planner.py sizes each test to decide; the configured samples are
    the least a test gets).
    max_retests: tests with known-good partners before a suspect is settled without a conviction: PASS when its
    combined figure is within the cut, else WARN (undecided).
    max_not_run: "could not run" results a node may collect in a row (a link: in all) before its verdict is ERROR;
    3, so an engine that refuses one job in 20 at random leaves about one node in 3,000 unchecked (with 2, one in 100).
    noise_floor: the smallest per-sample noise believed (relative), so identical samples never mean certainty.
    max_rounds: a hard stop. min_uplink_tests: cross-switch tests a switch needs before its uplink is judged.
    bisect_floor: a slow group of this many nodes or fewer is not halved again; its nodes go back to pair tests
    with known-good partners. max_scale_runs: full-scale runs (the first, and one to confirm after bisection).
    seed: seeds every random pairing; the same seed and results give the same rounds.
    settle_s: a node test that finds NVLink or the fabric down within this many seconds of the node's boot runs
    again this long after the boot (links train after every boot: NVIDIA/NVSentinel#1715), not convicted.
    rack_late: an NVL72 rack's all_reduce runs once at most this many of its trays still wait for their node test
    (CoreWeave's "up to two unavailable nodes per rack"); those join later with a known-good tray of the rack.
    """

    cut: float = 0.03
    z: float = stats.OUTLIER_Z
    clear_z: float = 2.0
    suite_samples: int = 32
    screen_samples: int = 8
    retest_samples: int = 32
    max_samples: int = 128
    max_retests: int = 3
    max_not_run: int = 3
    noise_floor: float = 0.005
    max_rounds: int = 40
    min_uplink_tests: int = 4
    bisect_floor: int = 3
    max_scale_runs: int = 2
    seed: int = 0
    settle_s: float = 600.0
    rack_late: int = 2


@dataclass(frozen=True)
class Standing:
    """A status with its cause (what decisions read) and its reason (for people)."""

    status: Status
    cause: Cause
    reason: str


@dataclass(frozen=True)
class Evidence:
    """One test judged: its figures, its shortfall against what, and the status it earned.

    status: PASS (confidently within the cut), WARN (not sure either way), FAIL (confidently beyond the cut, or
    the test crashed or hung), ERROR (could not run), SKIPPED (nothing to judge against). shortfall is the fraction
    under the reference (0.05 = 5% under; negative = above), se its standard error; both None when there is no
    figure. cause: why it has its status (causes.Cause), what every decision reads; reason: the same for people.
    """

    test: Test
    round: int
    status: Status
    shortfall: float | None
    se: float | None
    figures: Mapping[str, float]
    against: str
    reason: str
    cause: Cause = field(kw_only=True)


VerdictKind = Literal["node", "link", "uplink", "group"]


@dataclass(frozen=True)
class Verdict:
    """The verdict on one node, link, switch uplink or group, with the tests it rests on. cause: why it has its
    status (causes.Cause: what a failed node's fault code comes from); reason: the same for people."""

    kind: VerdictKind
    subject: str
    members: tuple[str, ...]
    status: Status
    reason: str
    evidence: tuple[Evidence, ...] = ()
    cause: Cause = field(kw_only=True)


@dataclass(frozen=True)
class FleetVerdicts:
    """Everything `gpuval fleet check` concludes: per node, per link, per switch uplink, per group."""

    nodes: Mapping[str, Verdict]
    links: Mapping[tuple[str, str], Verdict]
    uplinks: Mapping[str, Verdict]
    groups: tuple[Verdict, ...]
    rounds: int
    notes: tuple[str, ...] = ()  # what the judgement changed (a widened cut) and what to change to decide more
    racks: Mapping[str, str] = field(default_factory=dict)  # node -> its NVL72 rack, for the drain brake's count
    # nodes whose health suite measured GPU figures that were not judged against the fleet (too few nodes of their
    # GPU model, values that are no figures): a re-test of a node held for slow GPUs (FLEET_NODE_SLOW_GPU) must
    # judge them before it lifts it
    gpus_not_compared: frozenset[str] = frozenset()
