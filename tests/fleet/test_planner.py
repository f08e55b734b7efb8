"""The fleet planner's rules one by one, on scripted fleets (tests/fleet/scripted.py): no engine, the
planner is pure and the results are what a fleet with the stated fault would measure."""

from __future__ import annotations

import time

import pytest

from gpuval.errors import UsageError
from gpuval.results.model import Status
from gpuval.fleet.plan import FleetConfig, NodeStage, new_fleet, plan_next, take_round
from gpuval.fleet.plan import verdicts
from tests.fleet.scripted import healthy, results, run, sku

NODES = [f"n{i:02d}" for i in range(16)]


def test_round_zero_runs_every_node_suite_at_once_and_planning_is_pure():
    state = new_fleet(NODES, expect=sku)
    first = plan_next(state)
    assert first == plan_next(state)  # same state, same round: nothing is consumed by planning
    assert first.index == 0
    assert [t.nodes for t in first.tests] == [(n,) for n in NODES]
    assert {t.kind for t in first.tests} == {"node"}


def test_every_round_is_disjoint_in_nodes():
    state = new_fleet(NODES, expect=sku)
    while (rnd := plan_next(state)) is not None:
        used = [n for t in rnd.tests for n in t.nodes]
        assert len(used) == len(set(used)), rnd
        take_round(state, rnd, results(rnd, healthy))
    assert all(v.status == Status.PASS for v in verdicts(state).nodes.values())


def test_a_healthy_fleet_passes_in_three_rounds_suite_screen_and_full_scale():
    state = run(NODES, healthy)
    v = verdicts(state)
    assert v.rounds == 3
    assert [{t.purpose for t in r.tests} for r in state.rounds] == [{"suite"}, {"screen"}, {"scale"}]
    assert all(x.status == Status.PASS for x in v.nodes.values())
    assert all(x.status == Status.PASS for x in v.links.values())
    assert [g.status for g in v.groups] == [Status.PASS]


def _slow(bad: set[str], factor: float):
    def truth(kind, nodes):
        return factor if kind != "node" and bad & set(nodes) else 1.0
    return truth


def test_a_failing_pair_is_split_and_only_the_slow_member_is_convicted():
    state = run(NODES, _slow({"n05"}, 0.85))
    v = verdicts(state)
    assert v.nodes["n05"].status == Status.FAIL
    assert "2 known-good partners" in v.nodes["n05"].reason
    screen = next(e for e in v.nodes["n05"].evidence if e.test.purpose == "screen")
    partner = next(n for n in screen.test.nodes if n != "n05")
    assert screen.status == Status.FAIL
    assert v.nodes[partner].status == Status.PASS  # re-paired with a cleared node: one bad node never convicts it
    retests = [e for e in v.nodes["n05"].evidence if e.test.purpose == "retest"]
    retest_partners = {n for e in retests for n in e.test.nodes} - {"n05"}
    assert len(retest_partners) == 1 and partner not in retest_partners
    # The screening partner, cleared with another node in the same round as n05's first re-test, is the second
    # known-good witness: n05 is convicted in round 2, not after a second re-test.
    assert f"({', '.join(sorted(retest_partners | {partner}))})" in v.nodes["n05"].reason
    assert state.nodes["n05"].state == NodeStage.FAILED and len(state.rounds) == 4  # suite, screen, retest, scale
    assert all(x.status == Status.PASS for n, x in v.nodes.items() if n != "n05")
    assert v.links[tuple(sorted(screen.test.nodes))].status == Status.SKIPPED  # not judged: one end is slow


def test_a_pair_that_fails_only_together_is_a_bad_link_and_both_nodes_pass():
    groups = {n: "s0" if n in ("n00", "n01") else "s1" for n in NODES}  # the screen pairs inside switches first

    def truth(kind, nodes):
        return 0.8 if set(nodes) == {"n00", "n01"} else 1.0

    v = verdicts(run(NODES, truth, groups))
    assert v.links[("n00", "n01")].status == Status.FAIL
    assert "only together" in v.links[("n00", "n01")].reason
    assert len(v.links[("n00", "n01")].evidence) == 2  # failed, then confirmed once more
    assert v.nodes["n00"].status == Status.PASS and v.nodes["n01"].status == Status.PASS
    assert sum(x.status != Status.PASS for x in v.nodes.values()) == 0


def test_a_link_that_failed_once_by_noise_passes_on_its_confirmation():
    groups = {n: "s0" if n in ("n00", "n01") else "s1" for n in NODES}
    seen = {"n": 0}

    def truth(kind, nodes):
        if set(nodes) == {"n00", "n01"}:
            seen["n"] += 1
            return 0.85 if seen["n"] == 1 else 1.0
        return 1.0

    v = verdicts(run(NODES, truth, groups))
    assert v.links[("n00", "n01")].status == Status.WARN  # a firm failure that did not repeat: flaky, not bad
    assert all(x.status == Status.PASS for x in v.nodes.values())


def test_a_broken_node_is_convicted_by_its_second_crash_never_its_first():
    def truth(kind, nodes):
        return "NCCL timeout" if "n03" in nodes else 1.0

    state = new_fleet(NODES, expect=sku)
    rnd = plan_next(state)
    take_round(state, rnd, results(rnd, truth))
    assert state.nodes["n03"].state == NodeStage.NEW  # one crash: the suite runs again
    rnd = plan_next(state)
    assert ("n03",) in [t.nodes for t in rnd.tests if t.purpose == "rerun"]
    take_round(state, rnd, results(rnd, truth))
    assert state.nodes["n03"].state == NodeStage.FAILED


def test_a_node_that_crashes_once_then_passes_warns():
    calls = {"n": 0}

    def truth(kind, nodes):
        if nodes == ("n03",):
            calls["n"] += 1
            return "segfault" if calls["n"] == 1 else 1.0
        return 1.0

    v = verdicts(run(NODES, truth))
    assert v.nodes["n03"].status == Status.WARN
    assert "failed once" in v.nodes["n03"].reason


def test_a_health_suite_failure_convicts_at_once():
    state = new_fleet(NODES, expect=sku)
    rnd = plan_next(state)
    res = results(rnd, healthy)
    res[2] = type(res[2])(res[2].test_id, res[2].busbw, health=Status.FAIL, health_reason="XID 79")
    take_round(state, rnd, res)
    assert state.nodes["n02"].state == NodeStage.FAILED
    assert "XID 79" in state.nodes["n02"].reason


def test_could_not_run_is_never_a_hardware_verdict():
    def truth(kind, nodes):
        return None if "n07" in nodes else 1.0  # the engine refuses every job that has n07

    v = verdicts(run(NODES, truth))
    assert v.nodes["n07"].status == Status.ERROR
    assert "could not run" in v.nodes["n07"].reason
    assert all(x.status == Status.PASS for n, x in v.nodes.items() if n != "n07")


def test_a_refused_pair_is_run_again_with_no_verdict_against_either_node():
    refused = set()

    def truth(kind, nodes):
        if kind == "pair" and nodes not in refused and len(refused) < 3:
            refused.add(nodes)
            return None
        return 1.0

    v = verdicts(run(NODES, truth))
    assert all(x.status == Status.PASS for x in v.nodes.values())


def test_bisection_halves_run_together_and_recurse_into_the_slow_half():
    # n09 is fine in pair tests and slow in every group all_reduce: the full-scale run fails and bisection
    # narrows it down to a group of at most three, whose nodes go back to pair tests (which pass).
    def truth(kind, nodes):
        return 0.8 if kind == "group" and "n09" in nodes else 1.0

    state = run(NODES, truth)
    bisect_rounds = [r for r in state.rounds if r.tests[0].purpose == "bisect"]
    assert bisect_rounds
    for rnd in bisect_rounds:
        nodes = [n for t in rnd.tests for n in t.nodes]
        assert len(nodes) == len(set(nodes))  # halves are disjoint: one round
    first = bisect_rounds[0]
    assert len(first.tests) == 2 and sorted(n for t in first.tests for n in t.nodes) == sorted(NODES)
    for earlier, later in zip(bisect_rounds, bisect_rounds[1:]):
        if later.index != earlier.index + 1:
            continue  # a new bisection after the confirming full-scale run
        slow = [t for t in earlier.tests if "n09" in t.nodes]
        assert {n for t in later.tests for n in t.nodes} <= set(slow[0].nodes)  # only the slow half goes on
    v = verdicts(state)
    assert v.nodes["n09"].status == Status.PASS  # pairs never show it: the groups say where it is
    smallest = min((g for g in v.groups if g.status == Status.FAIL), key=lambda g: len(g.members))
    assert "n09" in smallest.members and len(smallest.members) <= 3
    assert "re-tested with known-good partners" in smallest.reason
    assert len([r for r in state.rounds if r.tests[0].purpose == "scale"]) == 2  # one confirmation, then stop


def test_a_group_slow_only_at_its_size_is_reported_when_both_halves_pass():
    def truth(kind, nodes):
        return 0.8 if kind == "group" and len(nodes) == 16 else 1.0

    v = verdicts(run(NODES, truth))
    assert any("slow only at 16 nodes" in g.reason for g in v.groups)
    assert all(x.status == Status.PASS for x in v.nodes.values())


def test_without_an_expectation_pairs_are_judged_against_each_other_and_the_full_scale_run_is_not_judged():
    v = verdicts(run(NODES, _slow({"n05"}, 0.85), expect=None))
    assert v.nodes["n05"].status == Status.FAIL
    assert "SKU" not in v.nodes["n05"].reason
    assert [g.status for g in v.groups] == [Status.SKIPPED]


def test_a_fleet_wide_shortfall_is_one_finding_not_a_node_verdict_each():
    v = verdicts(run(NODES, lambda kind, nodes: 1.0 if kind == "node" else 0.7))
    assert all(x.status == Status.PASS for x in v.nodes.values())
    assert any(g.subject == "every 2-node all_reduce" and g.status == Status.FAIL for g in v.groups)


def test_a_bad_uplink_fails_the_switch_not_its_nodes_and_explains_its_links():
    nodes = [f"n{i:03d}" for i in range(96)]
    groups = {n: f"s{i // 16}" for i, n in enumerate(nodes)}

    def truth(kind, ns):
        crossing = len({groups[n] for n in ns}) > 1
        return 0.8 if crossing and "s2" in {groups[n] for n in ns} else 1.0

    state = run(nodes, truth, groups)
    v = verdicts(state)
    assert v.uplinks["s2"].status == Status.FAIL
    assert all(x.status == Status.PASS for k, x in v.uplinks.items() if k != "s2")
    assert all(x.status == Status.PASS for x in v.nodes.values())
    assert not [k for k, x in v.links.items() if x.status in (Status.FAIL, Status.WARN)]
    scale = next(g for g in v.groups if g.subject.startswith("full scale"))
    assert scale.status == Status.PASS and not {n for n in nodes if groups[n] == "s2"} & set(scale.members)


def test_new_fleet_refuses_bad_input_in_one_line():
    with pytest.raises(UsageError):
        new_fleet([])
    with pytest.raises(UsageError, match="twice"):
        new_fleet(["a", "b", "a"])


def test_planning_a_round_of_16384_nodes_takes_well_under_a_second():
    nodes = [f"node{i:05d}" for i in range(16384)]
    groups = {n: f"sw{i // 16}" for i, n in enumerate(nodes)}
    state = new_fleet(nodes, FleetConfig(), sku, groups)
    rnd = plan_next(state)
    take_round(state, rnd, results(rnd, healthy))
    elapsed = []
    for _ in range(3):  # best of three: planning is pure, so it can be repeated
        t0 = time.process_time()  # CPU time: on a shared machine wall time measures the neighbours
        screen = plan_next(state)
        elapsed.append(time.process_time() - t0)
    assert len(screen.tests) == 8192 and {t.purpose for t in screen.tests} == {"screen"}
    assert min(elapsed) < 0.5  # about 0.15 s on this 2-core machine
