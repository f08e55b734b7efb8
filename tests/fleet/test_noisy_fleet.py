"""The fleet on a noisy rig and with nodes it cannot decide: the judgement widens its cut to the healthy spread and
says so, a crash convicts whatever the noise, an undecided node exits 2 with what to change, and a health check
that could not run leaves the node not cleared (the one node verdict)."""

from __future__ import annotations

from dataclasses import replace

from gpuval.fleet.plan import FleetConfig, TestResult, new_fleet, plan_next, take_round
from gpuval.fleet.plan import verdicts
from gpuval.fleet.run.outcome import FleetOutcome
from gpuval.results.model import Status
from tests.fleet import scripted

NODES = [f"n{i:02d}" for i in range(12)]
# How fast each node is on a shared CPU rig: 25-35% apart, none of it a fault.
SPEED = {n: 0.75 + 0.25 * ((i * 7) % 12) / 11 for i, n in enumerate(NODES)}


def _outcome(state) -> FleetOutcome:
    return FleetOutcome("run-1", "slurm", verdicts(state), [], {}, {}, "")


def test_a_spread_wider_than_the_cut_widens_it_and_a_crash_still_convicts():
    def truth(kind, nodes):
        if "n05" in nodes and kind == "pair":
            return "gloo: connection refused"  # its ranks cannot talk
        return min(SPEED[n] for n in nodes)

    state = scripted.run(NODES, truth, expect=None)
    outcome = _outcome(state)
    status = {n: v.status for n, v in outcome.verdicts.nodes.items()}
    assert status.pop("n05") is Status.FAIL and outcome.verdicts.nodes["n05"].reason.startswith("broken")
    assert set(status.values()) == {Status.PASS}, {n: v.reason for n, v in outcome.verdicts.nodes.items()}
    assert state.config.cut > 0.2 and any("widened from 3% to" in note for note in outcome.verdicts.notes)
    assert outcome.exit_code == 1


def test_without_a_known_good_partner_the_nodes_are_undecided_and_the_check_exits_2_saying_what_to_change():
    state = scripted.run(["a", "b"], lambda kind, nodes: "timeout" if kind == "pair" else 1.0, expect=None)
    outcome = _outcome(state)
    assert {v.status for v in outcome.verdicts.nodes.values()} == {Status.SKIPPED}  # never PASS, never WARN
    assert outcome.status is Status.SKIPPED and outcome.exit_code == 2
    [note] = [n for n in outcome.verdicts.notes if "undecided" in n]
    assert "--samples" in note and "--max-samples 256" in note and "--cut 0.06" in note and "--size" in note
    assert outcome.to_json()["notes"] == list(outcome.verdicts.notes)
    wide = scripted.run(["a", "b"], lambda kind, nodes: "timeout" if kind == "pair" else 1.0, expect=None,
                        config=FleetConfig(cut=0.5))
    [note] = [n for n in _outcome(wide).verdicts.notes if "undecided" in n]
    assert "--cut" not in note and "--size" in note  # a cut of 100% would call nothing slow: not offered


def test_a_health_check_that_could_not_run_leaves_the_node_not_cleared():
    def answers(rnd):
        got = scripted.results(rnd, scripted.healthy)
        return [replace(r, health=Status.ERROR, health_reason="could not run: dcgm_diag")
                if r.test_id.startswith("r0-") and r.health is not None and rnd.tests[i].nodes == ("n03",) else r
                for i, r in enumerate(got)]


    state = new_fleet(NODES, FleetConfig(), scripted.sku)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, answers(rnd))
    outcome = _outcome(state)
    v = outcome.verdicts.nodes["n03"]
    assert v.status is Status.ERROR and "health suite could not run" in v.reason
    assert outcome.exit_code == 2
    assert {x.status for n, x in outcome.verdicts.nodes.items() if n != "n03"} == {Status.PASS}




def test_samples_noisier_than_the_cut_widen_it_so_healthy_nodes_can_be_cleared():
    """Each sample 40% either way (a loaded 2-core rig), CPU's 8/4/8 samples: a 3% cut would clear nobody."""
    swing = (-0.4, 0.3, -0.1, 0.4, -0.3, 0.1, 0.0, -0.2)

    def answers(rnd):
        out = []
        for t in rnd.tests:
            if "n05" in t.nodes and t.kind == "pair":
                out.append(TestResult(t.id, error="gloo: Unable to find address for: ib0"))
                continue
            base = {"all_reduce": 200.0} if t.kind == "node" else dict(scripted.NOMINAL)
            out.append(TestResult(t.id, {c: tuple(b * (1 + swing[k % 8]) for k in range(t.samples))
                                         for c, b in base.items()}, health=Status.PASS if t.kind == "node" else None))
        return out

    state = new_fleet(NODES[:6], FleetConfig(suite_samples=8, screen_samples=4, retest_samples=8))
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, answers(rnd))
    outcome = _outcome(state)
    status = {n: v.status for n, v in outcome.verdicts.nodes.items()}
    assert status.pop("n05") is Status.FAIL
    assert set(status.values()) == {Status.PASS}, {n: v.reason for n, v in outcome.verdicts.nodes.items()}
    assert any("samples spread" in note for note in outcome.verdicts.notes) and outcome.exit_code == 1
