"""Noise-aware judgement of one test: against the fleet's own centre for its shape, and against the SKU.

Every figure becomes a ratio to a reference, and a test's shortfall is 1 - the mean ratio over all its samples.
The reference for peers is the median (stats.band) of the per-test means of the node suites and screening pairs
of the same shape (collective, node count): they are the one unbiased sample of the fleet (one test per node or
per two nodes), so the median is the healthy fleet even with many planted faults; re-tests, cross-switch and link
tests are aimed at suspects and would drag it down. Cross-switch pairs share the centre of the pairs inside
switches on purpose: in a small fleet half the cross-switch pairs may cross one bad uplink, which would drag a
centre of their own down (a fabric slow across every switch is a fleet-wide finding, see uplinks.py).

The noise is one per-sample relative sigma for the whole run, the MAD (stats.band) of each sample's deviation
from its own test's mean: run-to-run noise measured on this fleet, not assumed. A test of n samples then has a
standard error of noise / sqrt(n).

A shortfall d with standard error se is judged against a limit (FleetConfig.cut for peers, the SKU's fail limit
for the expectation): both through the one judge, `baselines.noisy.judge_mean` (a mean with its noise against a
band): FAIL when d - z se > limit, PASS when d + clear_z se <= limit, WARN in between (not sure: the planner
re-tests); against the SKU the band is the SKU's own, warn limit and fail limit each as it is. See FleetConfig for
why z is 3.5 and clear_z 2.

Each judged test carries its cause (causes.Cause: slow, crashed, could not run, health failed, ...) beside its
reason: what happens next is decided on the cause, the reason is for people.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import fmean
from typing import Mapping

from gpuval.baselines import Band
from gpuval.baselines.noisy import NoisyJudgement, judge_mean
from gpuval.diagnosis import stats
from gpuval.results.model import Status, worst_status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.node_figures import FleetFigures, GpuJudgement
from gpuval.fleet.plan.terms import CENTRE_PURPOSES, BusbwExpectation, Evidence, Expect, FleetConfig, Test, TestResult

Shape = tuple[str, int]  # (collective, node count)
# Healthy tests of one shape fall within this many (robust) sigmas of their centre: where that spread is wider than
# the cut, the cut widens to it (a shared CPU test rig spreads 25-35%; a GPU fleet a couple of percent).
SPREAD_Z = 3.0
MIN_SPREAD_TESTS = 3  # tests of a shape before their spread is believed
MAX_CUT = 0.5  # never wider: past it the check says what to change (more samples, a bigger size) instead


def scope_of(test: Test, groups: Mapping[str, str]) -> str:
    """'intra' when every node of a pair is under one switch, 'cross' when not, 'any' without a topology."""
    if test.kind != "pair" or not groups:
        return "any"
    return "intra" if len({groups.get(n, "") for n in test.nodes}) == 1 else "cross"


@dataclass
class Calibration:
    """What the fleet's own figures say so far: per-shape test means and centres, and the per-sample noise."""

    means: dict[Shape, list[float]] = field(default_factory=dict)
    centres: dict[Shape, float] = field(default_factory=dict)
    noise_parts: list[tuple[float, int]] = field(default_factory=list)  # (robust sigma, samples) per round
    noise: float = 0.0
    per_sample: bool = True
    fleet_short: dict[tuple[str, int], str] = field(default_factory=dict)
    samples: dict[Shape, list[int]] = field(default_factory=dict)  # samples behind each of `means`
    spread: dict[Shape, float] = field(default_factory=dict)  # sigma of the tests beyond their sampling noise
    node_cut: float = 0.0  # the cut of node tests, where their spread widened it (rounds._widen_cut)
    # Shapes with a figure of a node suite or screening pair. A fleet of NVL72 racks alone screens no pair (its trays
    # are tested in their racks' all_reduce): there the cross-switch pairs, random pairs of cleared trays of
    # different racks, are the pairs' only sample of the fleet, and make its centre.
    screened: set[Shape] = field(default_factory=set)
    gpus: FleetFigures = field(default_factory=FleetFigures)  # the node suites' figures per GPU model (node_figures.py)

    def update(self, pairs: list[tuple[Test, TestResult]], groups: dict[str, str], expect: Expect | None,
               cfg: FleetConfig) -> None:
        """Add one round's figures (tests that ran cleanly) and recompute the centres and the noise; the node tests'
        GPU figures go to `gpus`."""
        self.gpus.update(pairs)
        touched: set[Shape] = set()
        residuals: list[float] = []
        for test, result in pairs:
            if result.error or result.not_run or test.kind == "group":
                continue  # a group is judged against the SKU (a 2-node group against the pairs too), never a peer
            for coll, samples in result.busbw.items():
                if not samples:
                    continue
                key = (coll, len(test.nodes))
                mean = fmean(samples)
                if test.purpose in CENTRE_PURPOSES:
                    self.screened.add(key)
                if test.purpose in CENTRE_PURPOSES or (test.purpose == "cross" and key not in self.screened):
                    self.means.setdefault(key, []).append(mean)
                    self.samples.setdefault(key, []).append(len(samples))
                    touched.add(key)
                if len(samples) > 1 and mean > 0:
                    # Sample deviations from their own mean underestimate sigma by sqrt((n-1)/n): undo it.
                    k = math.sqrt(len(samples) / (len(samples) - 1))
                    residuals.extend(k * (x - mean) / mean for x in samples)
        for key in touched:
            self.centres[key] = stats.band(self.means[key]).center
        if residuals:
            self.noise_parts.append((stats.band(residuals).sigma, len(residuals)))
        self._update_noise(cfg)
        self._update_spread(touched)
        self._update_fleet_short(touched, expect)

    def _update_noise(self, cfg: FleetConfig) -> None:
        if self.noise_parts:
            # Each round's MAD, weighted by its samples: linear in the new samples, where pooling every
            # residual of every round would sort them all again each round.
            total = sum(n for _, n in self.noise_parts)
            sigma = sum(s * n for s, n in self.noise_parts) / total
            self.noise, self.per_sample = max(sigma, cfg.noise_floor), True
            return
        # One figure per test: only the spread between tests is known, which also holds the fleet's true spread,
        # so it over-states the noise (safe: fewer convictions, more re-tests).
        ratios = [m / self.centres[k] for k, ms in self.means.items() for m in ms if self.centres.get(k)]
        sigma = stats.band(ratios).sigma if ratios else 0.0
        self.noise, self.per_sample = max(sigma, cfg.noise_floor), False

    def _update_spread(self, touched: set[Shape]) -> None:
        """How far healthy tests of a shape differ beyond what their samples' noise explains (the per-sample noise
        shrinks with a test's samples; what does not is the rig's own spread: load, placement, a shared host)."""
        for key in touched:
            means, centre = self.means[key], self.centres[key]
            if len(means) < MIN_SPREAD_TESTS or centre <= 0:
                continue
            total = stats.band([m / centre for m in means]).sigma
            sampling = self.noise / math.sqrt(fmean(self.samples[key])) if self.per_sample else 0.0
            self.spread[key] = math.sqrt(max(total * total - sampling * sampling, 0.0))

    def _update_fleet_short(self, touched: set[Shape], expect: Expect | None) -> None:
        """A shape whose *centre* fails the SKU is a fleet-wide shortfall: judged against peers only from now."""
        if expect is None:
            return
        for coll, n in touched:
            exp = expect(coll, n)
            centre = self.centres[(coll, n)]
            judged = exp.band.judge(centre) if exp is not None else None
            if judged is not None and judged.status is Status.FAIL:
                self.fleet_short[(coll, n)] = (f"the typical {n}-node {coll} fails the SKU ({judged.reason}): a "
                                               "fleet-wide cause (configuration, fabric), not one node")

    def widest(self, cfg: FleetConfig, node_tests: bool) -> tuple[float, str]:
        """The cut the fleet's own figures call for (at most MAX_CUT), and why: SPREAD_Z sigmas of the widest
        healthy spread between tests of one shape (node tests, or pair and group tests: one node's loaded host
        never widens the judgement of the network); for pair and group tests also what a healthy node needs to be
        cleared by a re-test at this per-sample noise ((clear_z + 1) standard errors of retest_samples samples)."""
        found = [(0.0, "")]
        for (coll, n), sigma in self.spread.items():
            if (n == 1) == node_tests:
                found.append((SPREAD_Z * sigma, f"{n}-node {coll} tests spread {100 * sigma:.0f}% (robust sigma)"))
        if not node_tests and self.per_sample and self.noise > 0:
            need = (cfg.clear_z + 1) * self.noise / math.sqrt(cfg.retest_samples)
            found.append((need, f"samples spread {100 * self.noise:.0f}% each ({cfg.retest_samples} per re-test)"))
        cut, why = max(found)
        return min(cut, MAX_CUT), why

    def node_config(self, cfg: FleetConfig) -> FleetConfig:
        """The config node tests are judged with: the cut widened to the node tests' own spread."""
        return replace(cfg, cut=self.node_cut) if self.node_cut > cfg.cut else cfg

    def samples_for(self, se: float, collectives: int, floor: int, cap: int) -> int:
        """Samples per collective that bring a test of `collectives` collectives (their samples pooled) to a
        standard error of `se` at the measured per-sample noise: at least `floor`, at most max(floor, cap) (the most
        for an `se` of 0: nothing less could do); `floor` while the noise is not measured per sample."""
        if not self.per_sample or self.noise <= 0:
            return floor
        need = math.ceil((self.noise / se) ** 2 / collectives) if se > 0 else cap
        return min(max(floor, need), max(floor, cap))

    def se(self, samples: int) -> float:
        """Standard error of the mean ratio of `samples` samples."""
        return self.noise / math.sqrt(samples) if self.per_sample else self.noise


def classify(d: float, se: float, limit: float, cfg: FleetConfig) -> Status:
    """FAIL when confidently beyond the limit, PASS when confidently inside, WARN when not sure: the mean ratio
    1 - d (standard error se) against a band whose fail limit is 1 - limit, through the one judge."""
    band = Band("ratio to the reference", expected=1.0, fail_below=1.0 - limit)
    return judge_mean(band, 1.0 - d, se, cfg.z, cfg.clear_z).status


def confidently_beyond(d: float, se: float, cfg: FleetConfig) -> bool:
    """Whether a (combined) shortfall is beyond the cut by z standard errors: classify's FAIL."""
    return classify(d, se, cfg.cut, cfg) is Status.FAIL


def clears(ev: Evidence, cut: float) -> bool:
    """Whether a test says nothing against a link or an uplink: a pass, or a figure not sure either way but
    within the cut.

    Nodes need a confident pass (they become partners for others); a link or uplink is only in doubt when its
    figure is beyond the cut or the test crashed, which keeps noise from costing confirmation rounds.
    """
    if ev.status == Status.PASS:
        return True
    return ev.status == Status.WARN and ev.shortfall is not None and ev.shortfall <= cut


@dataclass(frozen=True)
class Basis:
    """What one round's tests are judged against: the fleet's own figures so far (calibration), the planner's knobs
    (config, with the cut the round judges by), the switches (groups: node -> switch, empty without a topology),
    the SKU's expectation (None: against the other tests only)."""

    calibration: Calibration
    config: FleetConfig
    groups: Mapping[str, str] = field(default_factory=dict)
    expect: Expect | None = None


# What a node test's health-suite verdict adds to its evidence: the cause, and the words for people.
_HEALTH = {Status.FAIL: (Cause.HEALTH_FAILED, "health suite failed"),
           Status.WARN: (Cause.HEALTH_WARNS, "health suite warns"),
           Status.ERROR: (Cause.HEALTH_NOT_RUN, "health suite could not run")}


def health_note(result: TestResult) -> str:
    """The health suite's part of a node test's reason ('health suite warns: ...'); '' when it passed or did not
    run with the test."""
    if result.health not in _HEALTH:
        return ""
    return f"{_HEALTH[result.health][1]}: {result.health_reason}"


def weigh(test: Test, result: TestResult, round_index: int, basis: Basis) -> Evidence:
    """The evidence one test gives: its status and cause, shortfall, standard error, and what it was judged
    against."""
    def ev(status: Status, cause: Cause, reason: str, figures: dict[str, float] | None = None) -> Evidence:
        return Evidence(test, round_index, status, None, None, figures or {}, "", reason, cause=cause)

    if test.kind == "node":
        basis = replace(basis, config=basis.calibration.node_config(basis.config))
    if result.not_run:
        return ev(Status.ERROR, Cause.COULD_NOT_RUN, f"could not run: {result.not_run}")
    if result.health == Status.ERROR and not any(result.busbw.values()):
        return ev(Status.ERROR, Cause.HEALTH_NOT_RUN, health_note(result))
    if result.error:
        blame = f" (reported on {', '.join(result.blame)})" if result.blame else ""
        return ev(Status.FAIL, Cause.CRASHED, f"ran and failed: {result.error}{blame}")
    figures = {c: fmean(s) for c, s in result.busbw.items() if s}
    if result.health == Status.FAIL:
        return ev(Status.FAIL, Cause.HEALTH_FAILED, health_note(result), figures)
    if not figures:
        return ev(Status.ERROR, Cause.COULD_NOT_RUN, "no figures came back")
    return _measured(test, result, figures, round_index, basis)


def _measured(test: Test, result: TestResult, figures: dict[str, float], round_index: int, basis: Basis) -> Evidence:
    """A test with figures: against the fleet's centre of its shape and against the SKU; a node test's health-suite
    figures also against the fleet's nodes of its GPU model (node_figures.py). Its cause: GPUS_SLOW when those fail,
    SLOW when its busbw fails, else what its node's health suite adds (warns, could not run), else MEASURED."""
    cal, cfg = basis.calibration, basis.config
    statuses, reasons, against = [], [], []
    peer = _peer(test, result, cal, scope_of(test, basis.groups), cfg)
    d = se = None
    if peer is not None:
        d, se, status, text = peer
        statuses.append(status)
        reasons.append(f"{100 * d:.1f}% ± {100 * se:.1f}% under the fleet (cut {100 * cfg.cut:.0f}%)")
        against.append(text)
    for coll, mean in figures.items():
        exp = basis.expect(coll, len(test.nodes)) if basis.expect else None
        if exp is None or (coll, len(test.nodes)) in cal.fleet_short:
            continue
        judged, d_e, se_e = _against_sku(mean, len(result.busbw[coll]), exp, cal, cfg)
        statuses.append(judged.status)
        if d is None:
            d, se = d_e, se_e
        reasons.append(f"{coll} vs SKU: {judged.reason} ({judged.status.value})")
        against.append(f"SKU {coll} at {len(test.nodes)} nodes: {exp.expected:.1f} GB/s, {_limits(exp.band)}"
                       + (f" ({exp.source})" if exp.source else ""))
    gpus: GpuJudgement | None = None
    if test.kind == "node" and result.gpus is not None:
        gpus = cal.gpus.judge(result.gpus)
        figures = {**figures, **result.gpus.means}
        if gpus.status is not None:
            statuses.append(gpus.status)
            against.append(gpus.against)
        # a failing GPU figure leads: it is what the node's verdict will be about
        reasons.insert(0 if gpus.status is Status.FAIL else len(reasons), gpus.reason)
    if not statuses:
        return Evidence(test, round_index, Status.SKIPPED, None, None, figures, "", "; ".join(
            ["not judged: no peers of this shape and no SKU expectation", *reasons]), cause=Cause.NOT_JUDGED)
    status = worst_status(statuses)
    cause = Cause.MEASURED if status is not Status.FAIL else \
        Cause.GPUS_SLOW if gpus is not None and gpus.status is Status.FAIL else Cause.SLOW
    if result.health in (Status.WARN, Status.ERROR):  # its figures are judged; on ERROR the node is not cleared
        reasons.append(health_note(result))
        if cause is Cause.MEASURED:
            cause = _HEALTH[result.health][0]
    return Evidence(test, round_index, status, d, se, figures, "; ".join(against), "; ".join(reasons), cause=cause)


def _limits(band: Band) -> str:
    parts = [f"{kind} below {limit:.1f}" for kind, limit in (("fail", band.fail_below), ("warn", band.warn_below))
             if limit is not None]
    return ", ".join(parts)


def _peer(test: Test, result: TestResult, cal: Calibration, scope: str,
          cfg: FleetConfig) -> tuple[float, float, Status, str] | None:
    """Shortfall against the centre of this test's shape, pooled over its collectives' samples."""
    ratios, text = [], []
    for coll, samples in result.busbw.items():
        centre = cal.centres.get((coll, len(test.nodes)))
        if not samples or not centre:
            continue
        ratios.extend(x / centre for x in samples)
        text.append(f"{coll} {centre:.1f} GB/s")
    if not ratios:
        return None
    d, se = 1.0 - fmean(ratios), cal.se(len(ratios))
    where = {"intra": ", same switch", "cross": ", across switches", "any": ""}[scope]
    against = f"fleet median of {len(test.nodes)}-node tests{where}: " + ", ".join(text)
    return d, se, classify(d, se, cfg.cut, cfg), against


def _against_sku(mean: float, samples: int, exp: BusbwExpectation, cal: Calibration,
                 cfg: FleetConfig) -> tuple[NoisyJudgement, float, float]:
    """The mean of `samples` samples against the SKU's band, its noise in GB/s (the fleet's relative per-sample
    noise times the mean); the shortfall and its standard error as fractions of the expected figure."""
    se = cal.se(samples)
    judged = judge_mean(exp.band, mean, se * mean, cfg.z, cfg.clear_z)
    return judged, 1.0 - mean / exp.expected, se * mean / exp.expected
