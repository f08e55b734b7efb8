"""NVL72 racks in the simulated fleet (benchmarks/fleet_racks.py's model: racks of 18 trays beside HGX nodes behind
switches, 5% noise, 5% of tests refused), through the planner, its verdicts, the rack findings and the drains into
the simulated Slurm node state (tests/helpers/sim_nodes.py), as `FleetRun.check` and `conclude` chain them. The
`benchmarks.fleet_racks` run at 16,384 nodes is the same model at scale (docs/nvl72.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fleet_isolation import expectation
from benchmarks.fleet_racks import TRAYS, RackFleet, make_rack_fleet, rack_spec, run_racks, score
from gpuval.fleet.act.drains import drain_failed, with_rack_faults, with_shared_faults
from gpuval.fleet.plan import Cause, FleetConfig, new_fleet, plan_next, take_round, verdicts
from gpuval.fleet.run.outcome import FleetOutcome, fault_codes
from gpuval.operate import brake
from gpuval.operate.brake import parse_cap
from gpuval.operate.evidence import Grounds
from gpuval.results.model import Status
from tests.helpers.sim_nodes import SimNodes

RUN = "20261201T120000Z-7ac0b1"


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    monkeypatch.setattr(brake, "SETTLE_S", 0.0)  # one simulated clock: nothing to wait for


def _check(fleet: RackFleet, tmp: Path, racks_known: bool = True) -> tuple[FleetOutcome, SimNodes, list]:
    """The check over the simulated fleet (the rounds it sent), then its drains under a 5% cap."""
    state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups, rack_spec(fleet) if racks_known else None)
    rounds = []
    while (rnd := plan_next(state)) is not None:
        rounds.append(rnd)
        take_round(state, rnd, fleet.run(rnd))
    found = verdicts(state)
    if not racks_known:  # as a check that knows no racks would: no rack to count
        from dataclasses import replace

        found = replace(found, racks={})
    health = {n: ["NVLINK_DOWN"] for n in fleet.down_until}
    codes = {n: fault_codes(v, health.get(n, [])) for n, v in found.nodes.items()}
    cap = parse_cap("5%", "--max-drain")
    found = with_shared_faults(with_rack_faults(found), {n: c for n, c in codes.items() if c}, cap)
    outcome = FleetOutcome(RUN, "slurm", found, [], {}, codes, "")
    sim = SimNodes(len(fleet.nodes), names=tuple(fleet.nodes))
    drain_failed(outcome, sim, cap, {n: Grounds("simulated", [], []) for n in outcome.failed}, tmp)
    return outcome, sim, rounds


def _rebooted(still_down: int) -> tuple[RackFleet, str]:
    """512 HGX nodes and 8 racks, nothing planted; rack 3 was just rebooted: every tray's NVLink is down at its first
    node test, 60 s after the boot, and for `still_down` node tests in all."""
    fleet = make_rack_fleet(512, 8, 0, seed=3)
    for tray in fleet.racks["rack0003"]:
        fleet.uptime[tray], fleet.down_until[tray] = 60.0, still_down
    return fleet, "rack0003"


def _about(outcome: FleetOutcome, trays: list[str]) -> list:
    """The group verdicts about the rack of `trays` that are not a plain pass."""
    return [g for g in outcome.verdicts.groups if set(g.members) == set(trays) and g.status is not Status.PASS]


def test_a_rack_whose_nvlink_came_up_after_its_reboot_is_one_warning_and_drains_nothing(tmp_path: Path):
    """NVIDIA/NVSentinel#1715: NVLink down on whole racks right after planned reboots, no fault. Each tray's node test
    is run again 540 s later (600 s after the boot); NVLink is up then: the rack's one finding warns, no tray fails,
    nothing is drained, and the rack's all_reduce then runs and passes."""
    fleet, rack = _rebooted(still_down=1)
    outcome, sim, rounds = _check(fleet, tmp_path)
    trays = fleet.racks[rack]
    [finding] = _about(outcome, trays)
    assert (finding.status, finding.cause) == (Status.WARN, Cause.AFTER_REBOOT)
    assert "18 of its trays" in finding.reason and "NVIDIA/NVSentinel#1715" in finding.reason
    assert not [t for t in trays if outcome.verdicts.nodes[t].status is Status.FAIL]
    assert sim.drained == [] and outcome.exit_code == 0
    reruns = [t for r in rounds for t in r.tests if t.kind == "node" and t.nodes[0] in trays and t.settle_s]
    assert sorted(t.nodes[0] for t in reruns) == sorted(trays) and {t.settle_s for t in reruns} == {540.0}
    assert any(e.test.purpose == "rack" and e.status is Status.PASS for e in finding.evidence)


def test_a_rack_whose_nvlink_stays_down_after_its_reboot_is_one_rack_finding_and_drains_nothing(tmp_path: Path):
    """Still down after the settle time: its 18 trays fail, and more than two trays of one rack failing at once is
    one rack finding (CoreWeave's rule), none drained. Before the rack count, the same check drained all 18."""
    fleet, rack = _rebooted(still_down=99)
    outcome, sim, _ = _check(fleet, tmp_path)
    trays = fleet.racks[rack]
    [finding] = _about(outcome, trays)
    assert (finding.status, finding.cause) == (Status.FAIL, Cause.RACK)
    assert finding.subject == "rack 0f1e2d3c-0003-4000-8000-00000000abcd.1003"  # the domain its trays read
    assert finding.reason.startswith("18 of its trays fail at once")
    assert sorted(outcome.failed) == sorted(trays) and sim.drained == []
    assert not [g for g in outcome.verdicts.groups if g.cause is Cause.SHARED_FAULT]
    unknown, sim_before, _ = _check(_rebooted(still_down=99)[0], tmp_path / "before", racks_known=False)
    assert sorted(sim_before.drained) == sorted(trays)  # the racks unknown: a drain per tray


@pytest.mark.parametrize("seed", [0, 1, 9])
def test_the_simulated_fleet_with_racks_names_a_bad_tray_in_its_rack_and_a_bad_rack_as_one(seed):
    """504 HGX nodes and 28 racks (1,008 nodes), 5% noise, 5% of tests refused, ten faults planted: GPUs (an HGX
    node's, a tray's), trays (one slow, one crashing), two whole racks, a rack's uplink, and an HGX node slow, one
    broken, a switch's uplink: every fault found, no false positive, at most 6 rounds. Seed 9's slow tray joins its
    rack late (its node test refused, its rack passed without it): judged against pairs of trays of the bad racks
    (a first try), it passed; against pairs of known-good trays, it is found."""
    fleet = make_rack_fleet(504, 28, 10, seed, noise=0.05, refuse=0.05)
    got = run_racks(fleet)
    assert (got["missed"], got["false_positives"]) == (0, 0) and got["rounds"] <= 6, got
    assert got["errors"] <= TRAYS + 2, got  # 3 refusals in a row: a node, or once in a while a rack's all_reduce


@pytest.mark.parametrize("seed", [2, 7])
def test_a_fleet_of_racks_alone_with_no_pair_band_finds_a_bad_trays_rack_and_uplink(seed):
    """24 racks (432 trays) and nothing else, no band for pairs (a GB200 site's profile has none): no tray screens a
    pair, so the cross-rack pairs are the pairs' centre, and a rack whose all_reduce ran late still has its uplink
    judged (a slow tray, a crashing one, a bad rack, a rack's bad uplink). Before: seed 2 missed its uplink (no
    cross-rack test of that rack ran), and an all-rack fleet with no pair band judged no cross-rack test at all."""
    fleet = make_rack_fleet(0, 24, 4, seed, 0.05, 0.05, kinds=("tray", "rack", "rack_uplink", "tray"))
    state = new_fleet(fleet.nodes, FleetConfig(), None, fleet.groups, rack_spec(fleet))
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, fleet.run(rnd))
    got = score(fleet, verdicts(state))
    assert (got["missed"], got["false_positives"]) == (0, 0) and got["rounds"] <= 6, got


def test_a_bad_tray_is_named_inside_its_rack_and_a_bad_rack_once_with_its_trays_not_judged_alone():
    fleet = make_rack_fleet(0, 6, 0, seed=5)
    slow = fleet.racks["rack0001"][7]
    fleet.tray_nvlink[slow], fleet.slow_trays = 0.8, {slow}
    fleet.rack_nvlink["rack0004"], fleet.bad_racks = 0.7, {"rack0004"}
    state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups, rack_spec(fleet))
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, fleet.run(rnd))
    found = verdicts(state)
    assert score(fleet, found)["missed"] == score(fleet, found)["false_positives"] == 0
    assert found.nodes[slow].status is Status.FAIL and found.nodes[slow].cause is Cause.SLOW
    [tray_rack] = [g for g in found.groups if slow in g.members]
    assert tray_rack.status is Status.FAIL and tray_rack.cause is Cause.SLOW and f"inside it {slow} fail" in \
        tray_rack.reason
    [bad] = [g for g in found.groups if g.cause is Cause.RACK]
    assert set(bad.members) == set(fleet.racks["rack0004"]) and "no tray stands out among the" in bad.reason
    assert {found.nodes[t].status for t in bad.members} == {Status.SKIPPED}
    assert {found.nodes[t].cause for t in bad.members} == {Cause.NOT_JUDGED}
