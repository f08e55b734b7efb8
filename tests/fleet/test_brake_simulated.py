"""The drain brake on the simulated fleet (benchmarks/fleet_isolation.py's model, up to 4,096 nodes), with the
simulated Slurm node state of tests/helpers/sim_nodes.py (no real slurmctld runs 4,096 nodes here): the fleet
check's verdicts, its shared-fault findings (fleet/act/drains.py) and its drains through operate.node_state and the
brake, as `FleetRun.check` and `conclude` chain them.

Before the brake, a bad baseline that fails every node's suite drained all 256 of 256 simulated nodes, and every
node test ending without a result (a job killed under them) did the same in two rounds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from benchmarks.fleet_isolation import Fleet, expectation, make_fleet
from gpuval.fleet.plan import Cause, FleetConfig, TestResult, new_fleet, plan_next, take_round
from gpuval.fleet.plan import verdicts
from gpuval.fleet.act.drains import drain_failed, with_shared_faults
from gpuval.fleet.run.outcome import FleetOutcome, fault_codes
from gpuval.fleet.run.records import verdict_records
from gpuval.operate import brake
from gpuval.operate.brake import parse_cap
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Grounds
from gpuval.results.model import Status
from tests.helpers.sim_nodes import SimNodes

RUN = "20261127T120000Z-51e0a1"  # the check's run id (a drain names gpuval's own ids only)


@dataclass
class Troubled(Fleet):
    """The simulated fleet, plus nodes whose health suite fails (`suite_fails`: node -> its failed checks' codes)
    and nodes whose node test ends without a result (`no_result`)."""

    suite_fails: dict[str, list[str]] = field(default_factory=dict)
    no_result: set[str] = field(default_factory=set)

    def measure(self, test_id: str, kind: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        found = super().measure(test_id, kind, nodes, samples)
        if kind == "node" and nodes[0] in self.no_result:
            return TestResult(test_id, error="ended without a result: job FAILED, exit code 143")
        if kind == "node" and nodes[0] in self.suite_fails:
            return replace(found, health=Status.FAIL, health_reason="failed: " + ", ".join(self.suite_fails[nodes[0]]))
        return found


def _check(fleet: Troubled, cap: str, evidence: Path, sim: SimNodes | None = None) -> tuple[FleetOutcome, SimNodes]:
    """The check over the simulated fleet, then its drains into `sim` [default: every node in service] under the
    cap, each drained node's bundle in `evidence` (as FleetRun.check and conclude do)."""
    state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups or None)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, fleet.run(rnd))
    found = verdicts(state)
    codes = {n: fault_codes(v, fleet.suite_fails.get(n, [])) for n, v in found.nodes.items()}
    limit = parse_cap(cap, "--max-drain")
    found = with_shared_faults(found, {n: c for n, c in codes.items() if c}, limit)
    outcome = FleetOutcome(RUN, "slurm", found, [], {}, codes, "")
    sim = sim or SimNodes(len(fleet.nodes))
    grounds = {n: Grounds("simulated", [], []) for n in outcome.failed}
    drain_failed(outcome, sim, limit, grounds, evidence)
    return outcome, sim


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    monkeypatch.setattr(brake, "SETTLE_S", 0.0)  # one simulated clock: nothing to wait for


def _troubled(n: int, faults: int, seed: int, **trouble) -> Troubled:
    base = make_fleet(n, faults, seed)
    return Troubled(**{f: getattr(base, f) for f in Fleet.__dataclass_fields__}, **trouble)


@pytest.mark.parametrize("trouble", ["suite", "no result"])
def test_256_nodes_failing_the_same_way_are_one_finding_and_none_is_drained(trouble, tmp_path: Path):
    nodes = [f"node{i:05d}" for i in range(256)]
    fleet = _troubled(256, 0, 1, **({"suite_fails": {n: ["ECC_ERRORS"] for n in nodes}} if trouble == "suite"
                                    else {"no_result": set(nodes)}))
    outcome, sim = _check(fleet, "5%", tmp_path)
    code = "ECC_ERRORS" if trouble == "suite" else "FLEET_NODE_CRASH"
    assert len(outcome.failed) == 256 and outcome.exit_code == 1  # every node's verdict stands: what it measured
    [finding] = [g for g in outcome.verdicts.groups if g.cause is Cause.SHARED_FAULT]
    assert finding.subject == f"{code} on 256 of 256 nodes" and len(finding.members) == 256
    assert "suspect the baseline, the software or a shared part, not the nodes" in finding.reason
    assert sim.drained == [] and {a.action for a in outcome.actions} == {Acted.NOT_DRAINED}
    assert not (tmp_path / "evidence").exists()  # no bundle for a node left in service
    assert any(n.startswith("to proceed: find what the failing nodes share") for n in outcome.verdicts.notes)
    [stored] = [r for r in verdict_records(outcome.verdicts, RUN, "slurm") if r.name == "group"]
    assert (stored.status, stored.data.cause, len(stored.data.members)) == (Status.FAIL, "shared fault", 256)


def test_4096_nodes_one_bad_baseline_and_two_genuinely_bad_nodes(tmp_path: Path):
    """Every node fails GEMM_SLOW (the baseline's band is wrong); two also have ECC errors of their own: one
    finding for GEMM_SLOW, and the two drained for what is theirs."""
    fleet = _troubled(4096, 0, 2)
    fleet.suite_fails = {n: ["GEMM_SLOW"] for n in fleet.nodes}
    fleet.suite_fails["node00100"] = fleet.suite_fails["node03000"] = ["GEMM_SLOW", "ECC_ERRORS"]
    outcome, sim = _check(fleet, "5%", tmp_path)
    assert [g.subject for g in outcome.verdicts.groups if g.cause is Cause.SHARED_FAULT] == ["GEMM_SLOW on 4096 of 4096 nodes"]
    assert sim.drained == ["node00100", "node03000"]
    assert sim.states["node00100"].reason == "gpuval: GEMM_SLOW ECC_ERRORS " + RUN
    assert sorted(p.parent.name for p in (tmp_path / "evidence").glob("*/*.yaml")) == ["node00100", "node03000"]


def test_4096_nodes_with_eight_faults_every_bad_node_is_still_drained(tmp_path: Path):
    fleet = _troubled(4096, 8, 7)
    outcome, sim = _check(fleet, "5%", tmp_path)
    bad = sorted(set(fleet.broken) | fleet.slow)
    assert sorted(outcome.failed) == bad and sorted(sim.drained) == bad
    assert not [g for g in outcome.verdicts.groups if g.cause in (Cause.SHARED_FAULT, Cause.DRAIN_CAPPED)]


def test_past_the_cap_the_rest_are_one_finding_counting_what_gpuval_held_before(tmp_path: Path):
    """gpuval held 200 of the 4,096 nodes drained already (an earlier check's), the cap is 5% (205): of the six
    nodes this check convicts, five are drained in the check's order and one is left in service, said once."""
    fleet = _troubled(4096, 8, 7)
    sim = SimNodes(4096)
    for node in sim.states:
        if len(sim.drained) == 200:
            break
        if node not in fleet.broken and node not in fleet.slow:
            sim.drain(node, "gpuval: FLEET_SLOW 20261126T120000Z-00e411")  # an earlier check's
    outcome, sim = _check(fleet, "5%", tmp_path, sim)
    assert len(sim.drained) == 205 and len(outcome.failed) == 6
    [capped] = [g for g in outcome.verdicts.groups if g.cause is Cause.DRAIN_CAPPED]
    assert capped.members == (outcome.failed[-1],) and capped.status is Status.FAIL
    assert capped.reason.startswith("gpuval holds 205 nodes drained and its cap is 205 (5% of 4096 nodes, at least 2; "
                                    "--max-drain): 1 failed node is not drained")
    assert [a.action for a in outcome.actions] == [Acted.DRAINED] * 5 + [Acted.NOT_DRAINED]
