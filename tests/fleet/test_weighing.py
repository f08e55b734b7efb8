"""Noise-aware judgement: the fleet's own centre and noise, the limits, and what is never a hardware verdict."""

from __future__ import annotations

import random

import pytest

from gpuval.results.model import Status
from gpuval.fleet.plan import BusbwExpectation, FleetConfig, Test, TestResult
from gpuval.fleet.plan.weighing import Basis, Calibration, classify, clears, weigh

CFG = FleetConfig()


def _pair(i: int, purpose: str = "screen", samples: int = 8) -> Test:
    return Test(f"t{i}", "pair", (f"a{i}", f"b{i}"), samples, purpose)


def _calibrated(sigma: float, n: int = 400, seed: int = 0) -> tuple[Calibration, list[tuple[Test, TestResult]]]:
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        t = _pair(i)
        pairs.append((t, TestResult(t.id, {c: tuple(v * (1 + rng.gauss(0, sigma)) for _ in range(8))
                                            for c, v in (("all_reduce", 100.0), ("sendrecv", 40.0))})))
    cal = Calibration()
    cal.update(pairs, {}, None, CFG)
    return cal, pairs


def test_the_noise_is_measured_from_the_samples_not_assumed():
    for sigma in (0.01, 0.03, 0.06):
        cal, _ = _calibrated(sigma)
        assert cal.noise == pytest.approx(sigma, rel=0.08)
        assert cal.per_sample
    assert cal.centres[("all_reduce", 2)] == pytest.approx(100.0, rel=0.01)


def test_identical_samples_never_mean_certainty():
    cal = Calibration()
    t = _pair(0)
    cal.update([(t, TestResult(t.id, {"all_reduce": (100.0,) * 8}))], {}, None, CFG)
    assert cal.noise == CFG.noise_floor


def test_only_suites_and_screens_set_the_centre():
    cal, _ = _calibrated(0.01)
    slow = _pair(999, purpose="retest")
    cal.update([(slow, TestResult(slow.id, {"all_reduce": (50.0,) * 8}))] * 300, {}, None, CFG)
    assert cal.centres[("all_reduce", 2)] == pytest.approx(100.0, rel=0.01)


def test_classify_fails_beyond_the_cut_by_z_errors_passes_inside_by_clear_z_and_is_unsure_between():
    se = 0.005
    assert classify(0.03 + 3.5 * se + 1e-6, se, 0.03, CFG) == Status.FAIL
    assert classify(0.03 + 3.5 * se - 1e-6, se, 0.03, CFG) == Status.WARN
    assert classify(0.03 - 2.0 * se, se, 0.03, CFG) == Status.PASS
    assert classify(0.03 - 2.0 * se + 1e-6, se, 0.03, CFG) == Status.WARN


def test_a_slow_pair_fails_a_healthy_one_passes_and_the_evidence_says_against_what():
    cal, pairs = _calibrated(0.03)
    t = _pair(1000, "retest", samples=32)
    slow = TestResult(t.id, {"all_reduce": (85.0,) * 32, "sendrecv": (34.0,) * 32})
    ev = weigh(t, slow, 3, Basis(cal, CFG))
    assert ev.status == Status.FAIL and ev.shortfall == pytest.approx(0.15, abs=0.01)
    assert ev.se == pytest.approx(0.03 / 8, rel=0.1)  # 64 samples
    assert "fleet median of 2-node tests" in ev.against and ev.round == 3
    good = weigh(t, TestResult(t.id, {"all_reduce": (100.0,) * 32, "sendrecv": (40.0,) * 32}), 3, Basis(cal, CFG))
    assert good.status == Status.PASS


def test_a_test_is_also_judged_against_the_sku_when_the_caller_has_an_expectation():
    cal, _ = _calibrated(0.01)
    t = _pair(1000, "retest", samples=32)

    def expect(coll, n):
        return BusbwExpectation.limits(120.0, 108.0, source="sku.yaml") if coll == "all_reduce" else None

    healthy = TestResult(t.id, {"all_reduce": (100.0,) * 32, "sendrecv": (40.0,) * 32})
    ev = weigh(t, healthy, 1, Basis(cal, CFG, expect=expect))
    assert ev.status == Status.FAIL  # fine among its peers, under the SKU's fail limit
    assert "sku.yaml" in ev.against


def test_a_fleet_wide_shortfall_stops_judging_that_shape_against_the_sku():
    def expect(coll, n):
        return BusbwExpectation.limits(200.0, 180.0)

    cal, pairs = _calibrated(0.01)
    cal.update(pairs, {}, expect, CFG)
    assert ("all_reduce", 2) in cal.fleet_short and "fleet-wide" in cal.fleet_short[("all_reduce", 2)]
    t, r = pairs[0]
    assert weigh(t, r, 1, Basis(cal, CFG, expect=expect)).status == Status.PASS


def test_could_not_run_and_crashes_are_told_apart():
    cal, _ = _calibrated(0.01)
    t = _pair(5)
    refused = weigh(t, TestResult(t.id, not_run="quota exceeded"), 1, Basis(cal, CFG))
    assert refused.status == Status.ERROR and "could not run" in refused.reason
    crashed = weigh(t, TestResult(t.id, error="NCCL timeout", blame=("a5",)), 1, Basis(cal, CFG))
    assert crashed.status == Status.FAIL and crashed.shortfall is None and "a5" in crashed.reason
    suite_error = weigh(Test("n", "node", ("a5",), 8, "suite"),
                        TestResult("n", health=Status.ERROR, health_reason="no NVML"), 0, Basis(cal, CFG))
    assert suite_error.status == Status.ERROR


def test_a_group_with_no_expectation_is_not_judged():
    cal, _ = _calibrated(0.01)
    t = Test("g", "group", tuple(f"x{i}" for i in range(8)), 32, "scale")
    ev = weigh(t, TestResult("g", {"all_reduce": (99.0,) * 32}), 4, Basis(cal, CFG))
    assert ev.status == Status.SKIPPED and ev.figures == {"all_reduce": 99.0}


def test_a_figure_within_the_cut_clears_a_link_even_when_not_sure():
    cal, _ = _calibrated(0.03)
    t = _pair(7)
    unsure = weigh(t, TestResult(t.id, {"all_reduce": (98.0,) * 8, "sendrecv": (39.2,) * 8}), 1, Basis(cal, CFG))
    assert unsure.status == Status.WARN and clears(unsure, CFG.cut)
    beyond = weigh(t, TestResult(t.id, {"all_reduce": (95.0,) * 8, "sendrecv": (38.0,) * 8}), 1, Basis(cal, CFG))
    assert beyond.status == Status.WARN and not clears(beyond, CFG.cut)


def test_a_sku_band_with_only_a_warn_limit_warns_never_fails():
    """The SKU's warn limit is judged as a warn limit (through baselines.noisy), never turned into a fail limit."""
    cal, _ = _calibrated(0.01)
    t = _pair(1000, "retest", samples=32)

    def expect(coll, n):
        return BusbwExpectation.limits(120.0, warn_below=108.0, source="sku.yaml") if coll == "all_reduce" else None

    healthy = TestResult(t.id, {"all_reduce": (100.0,) * 32, "sendrecv": (40.0,) * 32})
    ev = weigh(t, healthy, 1, Basis(cal, CFG, expect=expect))
    assert ev.status == Status.WARN and "warn limit" in ev.reason
