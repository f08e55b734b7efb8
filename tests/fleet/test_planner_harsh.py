"""The planner's rules for a harsh fabric, one by one on scripted fleets (tests/fleet/scripted.py): tests sized by the
fleet's measured noise, a suspect's tests with known-good partners judged together both ways, a screening partner
cleared later as a witness, a failure across an uplink in doubt never pinned on the node, could-not-run counted in a
row, and the full-scale run beside a tail of re-tests."""

from __future__ import annotations

from gpuval.fleet.plan import FleetConfig, NodeStage, TestResult, new_fleet, plan_next, take_round
from gpuval.fleet.plan import verdicts
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.planner import MARGIN
from gpuval.results.model import Status
from tests.fleet.scripted import NOMINAL, healthy, results, run, sku

NODES = [f"n{i:02d}" for i in range(16)]
# A noisy fabric: each sample up to 7.5% either way (a per-sample noise of about 5.5%, measured by the planner).
NOISY = (-0.075, -0.0375, 0.0, 0.0375, 0.075)


def noisy_results(rnd, truth):
    """The scripted fleet's answers with NOISY's jitter instead of scripted.JITTER."""
    out = []
    for t in rnd.tests:
        v = truth(t.kind, t.nodes)
        base = {"all_reduce": 200.0} if t.kind == "node" else {c: NOMINAL[c] for c in t.collectives}
        out.append(TestResult(t.id, {c: tuple(b * v * (1 + NOISY[k % 5]) for k in range(t.samples))
                                     for c, b in base.items()}, health=Status.PASS if t.kind == "node" else None))
    return out


def run_noisy(nodes, truth, config=None):
    state = new_fleet(nodes, config or FleetConfig(), sku)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, noisy_results(rnd, truth))
    return state


def test_pair_tests_take_the_samples_the_measured_noise_needs_and_the_configured_ones_on_a_quiet_fleet():
    quiet = run(NODES, healthy)
    assert {t.samples for t in quiet.rounds[1].tests} == {FleetConfig().screen_samples}
    state = run_noisy(NODES, healthy)
    cal, cfg = state.calibration, state.config
    [screens] = {t.samples for t in state.rounds[1].tests}
    # A node at the fleet's centre passes its screen with clear_z + MARGIN standard errors inside the cut.
    assert screens > cfg.screen_samples
    assert cal.noise / (2 * screens) ** 0.5 <= cfg.cut / (cfg.clear_z + MARGIN)
    assert all(v.status is Status.PASS for v in verdicts(state).nodes.values())


def test_a_suspect_just_past_the_cut_gets_re_tests_big_enough_to_decide_it():
    def truth(kind, nodes):
        return 0.958 if kind == "pair" and "n05" in nodes else 1.0  # 4.2% slow: 1.2 points past the cut

    state = run_noisy(NODES, truth)
    cfg, noise = state.config, state.calibration.noise
    first, second = [e.test.samples for e in state.nodes["n05"].evidence if e.test.purpose == "retest"]
    # The first re-test decides a node half-way to the cut with clear_z + MARGIN standard errors to spare ...
    assert first > cfg.retest_samples and noise / (2 * first) ** 0.5 <= cfg.cut / 2 / (cfg.clear_z + MARGIN)
    # ... the next is sized from what the tests so far say: a shortfall this close to the cut needs more.
    assert second > first
    v = verdicts(state).nodes
    assert v["n05"].status is Status.FAIL and v["n05"].cause is Cause.SLOW
    assert all(x.status is Status.PASS for n, x in v.items() if n != "n05")


def test_tests_with_known_good_partners_that_are_each_not_sure_clear_a_node_together():
    """Every sample 0.4% either way (even counts: each test's mean is its truth exactly); n05 2.87% under the fleet,
    inside the 3% cut by less than two standard errors of one re-test, by more than two of its tests together."""
    def answers(rnd):
        out = []
        for t in rnd.tests:
            v = 0.9713 if t.kind == "pair" and "n05" in t.nodes else 1.0
            base = {"all_reduce": 200.0} if t.kind == "node" else {c: NOMINAL[c] for c in t.collectives}
            out.append(TestResult(t.id, {c: tuple(b * v * (1.004 if k % 2 else 0.996) for k in range(t.samples))
                                         for c, b in base.items()}, health=Status.PASS if t.kind == "node" else None))
        return out

    state = new_fleet(NODES, FleetConfig(max_samples=32), sku)  # no bigger re-test: the tests so far decide
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, answers(rnd))
    rec = state.nodes["n05"]
    tests = [e for e in rec.evidence if e.test.kind == "pair"]
    assert all(e.status is Status.WARN for e in tests)  # not one of them is sure alone
    assert [e.test.purpose for e in tests] == ["screen", "retest", "retest"]  # before max_retests runs out
    assert rec.state is NodeStage.CLEARED and "together: within the cut" in rec.reason
    assert verdicts(state).nodes["n05"].status is Status.PASS


def test_a_failure_across_an_uplink_in_doubt_is_never_pinned_on_the_node():
    """Every node of switch s2 is not sure inside its switch (so none is cleared, and s2's uplink is never judged) and
    every test across s2's uplink is slow: a node or its uplink, nothing tells which. Re-tested with partners under
    other switches, none is convicted; each is left undecided, saying why."""
    nodes = [f"n{i:03d}" for i in range(96)]
    groups = {n: f"s{i // 16}" for i, n in enumerate(nodes)}

    def truth(kind, ns):
        switches = {groups[n] for n in ns}
        if "s2" not in switches or kind == "node":
            return 1.0
        return 0.97 if len(switches) == 1 else 0.8  # inside s2: at the cut (not sure); across s2's uplink: slow

    v = verdicts(run(nodes, truth, groups))
    s2 = [n for n in nodes if groups[n] == "s2"]
    assert {v.nodes[n].status for n in s2} == {Status.SKIPPED}
    assert all(v.nodes[n].cause is Cause.UNDECIDED and "uplink" in v.nodes[n].reason for n in s2)
    assert all(x.status is Status.PASS for n, x in v.nodes.items() if n not in s2)


def test_refusals_with_runs_in_between_never_make_a_node_could_not_run():
    seen = {"suite": 0, "pair": 0}

    def truth(kind, nodes):
        if "n07" not in nodes:
            return 1.0
        seen[kind] = seen.get(kind, 0) + 1
        return None if seen[kind] == 1 else 1.0  # its first suite and its first pair test are refused

    state = run(NODES, truth)
    assert state.nodes["n07"].state is NodeStage.CLEARED
    assert verdicts(state).nodes["n07"].status is Status.PASS


def test_the_full_scale_run_goes_beside_the_re_tests_of_the_last_few_nodes():
    nodes = [f"n{i:03d}" for i in range(200)]
    refused = {"n": 0}

    def truth(kind, ns):
        if kind == "pair" and "n007" in ns and refused["n"] < 2:
            refused["n"] += 1
            return None  # n007's first two pair tests are refused: it is the tail
        return 1.0

    state = run(nodes, truth)
    purposes = [{t.purpose for t in r.tests} for r in state.rounds]
    # n007's re-test with a known-good partner is all that is left (1% of the fleet): the full-scale run goes beside.
    assert purposes == [{"suite"}, {"screen"}, {"retest"}, {"retest", "scale"}], purposes
    v = verdicts(state).nodes
    assert all(x.status is Status.PASS for x in v.values())
    assert "not in the full-scale run" in v["n007"].reason


def test_a_full_scale_run_that_could_not_run_runs_again_beside_the_tail():
    nodes = [f"n{i:03d}" for i in range(200)]
    refused = {"pair": 0, "group": 0}

    def truth(kind, ns):
        if (kind == "pair" and "n007" in ns and refused["pair"] < 2) or (kind == "group" and not refused["group"]):
            refused[kind] += 1
            return None
        return 1.0

    state = run(nodes, truth)
    scale_rounds = [r.index for r in state.rounds if any(t.purpose == "scale" for t in r.tests)]
    assert len(scale_rounds) == 2 and scale_rounds[1] == scale_rounds[0] + 1
    assert all(x.status is Status.PASS for x in verdicts(state).nodes.values())


def test_a_suspect_is_re_tested_with_its_cleared_screening_partner_once_confirming_their_link_in_the_same_test():
    def answers(rnd):
        def truth(kind, nodes):
            if rnd.index == 1 and "n05" in nodes:
                return 0.965  # n05's screen: 3.5% under, not sure, beyond the cut: both suspects, their link open
            if rnd.index == 2 and "n05" in nodes:
                return None  # n05's first re-test is refused; its screening partner is cleared meanwhile
            return 1.0
        return results(rnd, truth)

    state = new_fleet(NODES, FleetConfig(), sku)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, answers(rnd))
    tests = [e.test for e in state.nodes["n05"].evidence if e.test.kind == "pair"]
    partner = next(n for n in tests[0].nodes if n != "n05")
    assert [t.purpose for t in tests] == ["screen", "retest", "retest"] and set(tests[-1].nodes) == {"n05", partner}
    link = verdicts(state).links[tuple(sorted(("n05", partner)))]
    assert link.status is Status.PASS and len(link.evidence) == 2  # the screen, then n05's re-test: no link round
    assert not any(t.purpose == "link" for r in state.rounds for t in r.tests)
    assert all(v.status is Status.PASS for v in verdicts(state).nodes.values())
