"""Typed causes: every decision of the fleet check reads a cause, never the words of a reason, and the fault codes
come from the cause through an append-only enum.

The representative fleet is benchmarks/fleet_isolation.py's simulated one (96 nodes under 6 switches, 3% noise, a
slow and a broken node and a slow uplink planted by it), with one node planted per cause the check tells apart:
crashing only with partners, slow only with partners, slow in its own node test, crashing in its own node test,
crashing once, a failing health suite (with and without a fault code), a warning one, one that could not run, a
node whose every test is refused, one just past the cut (undecided), and one whose GPUs all run slow (every node
test reports GPU figures: the simulation's, benchmarks/fleet_isolation.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, fields, replace
from typing import Any

import pytest

from benchmarks.fleet_isolation import Fleet, expectation, make_fleet
from gpuval.results.model import Status
from gpuval.fleet.plan import (
    Cause, FleetConfig, FleetVerdicts, TestResult, new_fleet, plan_next, take_round, verdicts,
)
from gpuval.fleet.plan import rounds
from gpuval.fleet.plan import knowledge
from gpuval.fleet.plan import uplinks
from gpuval.fleet.run.outcome import fault_codes, fault_of
from gpuval.operate.codes import FleetFault

# Released members, in order: a later gpuval may append, never rename, remove or reorder (causes.py says why).
RELEASED_FAULTS = ["FLEET_SLOW", "FLEET_BROKEN", "FLEET_NODE_SLOW", "FLEET_NODE_CRASH", "FLEET_NODE_HEALTH",
                   "FLEET_NVL_DOMAIN", "FLEET_NODE_SLOW_GPU"]
RELEASED_CAUSES = [
    ("MEASURED", "measured"), ("SLOW", "slow"), ("CRASHED", "crashed"), ("COULD_NOT_RUN", "could not run"),
    ("NOT_JUDGED", "not judged"), ("HEALTH_FAILED", "health failed"), ("HEALTH_NOT_RUN", "health not run"),
    ("HEALTH_WARNS", "health warns"), ("NODE_SLOW", "node slow"), ("NODE_CRASHED", "node crashed"),
    ("BROKEN", "broken"), ("UNDECIDED", "undecided"), ("FAILED_ONCE", "failed once"), ("FLEET_WIDE", "fleet wide"),
    ("SHARED_FAULT", "shared fault"), ("DRAIN_CAPPED", "drain capped"), ("RACK", "rack"), ("FELL_BACK", "fell back"),
    ("AFTER_REBOOT", "after reboot"), ("NVL_DOMAIN", "nvlink domain"), ("GPUS_SLOW", "gpus slow"),
]

PLANTED = {  # node -> what is wrong with it (the simulated fleet's own faults come on top)
    "node00003": "crashes with partners", "node00010": "slow with partners", "node00017": "slow in its node test",
    "node00024": "crashes in its node test", "node00035": "crashes once", "node00038": "health fails",
    "node00045": "health fails, no code", "node00052": "health warns", "node00059": "health could not run",
    "node00066": "always refused", "node00075": "just past the cut", "node00082": "GPUs slow",
}
fleet_verdicts = importlib.import_module("gpuval.fleet.plan.verdicts")  # the package's `verdicts` is the function
HEALTH_CODES = {"node00038": ["ECC_UNCORRECTED"]}  # what the driver keeps from a failed health record's codes


@dataclass
class Planted(Fleet):
    """The simulated fleet with PLANTED's faults."""

    node_tests: dict[str, int] = field(default_factory=dict)

    def measure(self, test_id: str, kind: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        why = {PLANTED[n] for n in nodes if n in PLANTED}
        if "always refused" in why:
            return TestResult(test_id, not_run="the engine refused the job (simulated)")
        if kind == "node":
            return self._node_test(test_id, nodes[0], samples)
        if "crashes with partners" in why:
            return TestResult(test_id, error="NCCL error: remote process exited", blame=nodes)
        return super().measure(test_id, kind, nodes, samples)

    def _node_test(self, test_id: str, node: str, samples: int) -> TestResult:
        what = PLANTED.get(node, "")
        self.node_tests[node] = seen = self.node_tests.get(node, 0) + 1
        if what == "crashes in its node test" or (what == "crashes once" and seen == 1):
            return TestResult(test_id, error="in-node all_reduce over 8 ranks exited 1", blame=(node,))
        got = super().measure(test_id, "node", (node,), samples)
        health = {"health fails": Status.FAIL, "health fails, no code": Status.FAIL, "health warns": Status.WARN,
                  "health could not run": Status.ERROR}.get(what, Status.PASS)
        return replace(got, health=health, health_reason=f"{what or 'every check'}: simulated")


def _fleet() -> Planted:
    base = make_fleet(96, 3, seed=4, noise=0.03, gpu_slow=0)
    fleet = Planted(**{f.name: getattr(base, f.name) for f in fields(base)})
    fleet.speed["node00010"] = 0.80
    fleet.in_node["node00017"] = 0.70
    fleet.speed["node00075"] = 0.953  # past the (widened) cut by less than its re-tests settle: undecided
    fleet.gpu["node00082"] = 0.70
    return fleet


def _check() -> tuple[dict[str, Any], FleetVerdicts]:
    """Run the check on the representative fleet: everything but prose (rounds, verdicts, causes, codes), and the
    verdicts themselves."""
    fleet = _fleet()
    state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups)
    plans = []
    while (rnd := plan_next(state)) is not None:
        plans.append([(t.id, t.purpose, t.nodes) for t in rnd.tests])
        take_round(state, rnd, fleet.run(rnd))
    found = verdicts(state)
    return {
        "rounds": plans,
        "nodes": {n: (v.status, v.cause, tuple(fault_codes(v, HEALTH_CODES.get(n, []))))
                  for n, v in found.nodes.items()},
        "links": {k: (v.status, v.cause) for k, v in found.links.items()},
        "uplinks": {k: (v.status, v.cause) for k, v in found.uplinks.items()},
        "groups": [(v.members, v.status, v.cause) for v in found.groups],
        "evidence": [(e.test.id, e.status, e.cause) for v in found.nodes.values() for e in v.evidence],
        "notes": len(found.notes),
    }, found


# Words the check once decided on ("health suite failed", "undecided", ...): a rewrite into them must change nothing.
ADVERSARIAL = ("broken: node suite: health suite failed: undecided; health suite warns; health suite could not run: "
               "slow")


def _rewrite_every_reason(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Every reason the check reads or writes becomes `text`: what the nodes said (errors, could-not-run reasons,
    health reasons), every test's evidence, every node's, link's, uplink's and group run's words, every verdict."""
    def words(value: Any) -> Any:
        return text if isinstance(value, str) and value else value

    real_run, real_judge = Fleet.run, rounds.weigh
    monkeypatch.setattr(Fleet, "run", lambda self, rnd: [
        replace(r, error=words(r.error), not_run=words(r.not_run), health_reason=words(r.health_reason))
        for r in real_run(self, rnd)])
    monkeypatch.setattr(rounds, "weigh", lambda *a, **k: replace(
        real_judge(*a, **k), reason=text, against=text))
    monkeypatch.setattr(rounds, "health_note", lambda result: text)
    for module in (rounds, uplinks, fleet_verdicts):
        if hasattr(module, "Standing"):
            monkeypatch.setattr(module, "Standing", lambda status, cause, reason: knowledge.Standing(
                status, cause, words(reason)))
    for cls in (knowledge.NodeHistory, knowledge.LinkHistory, knowledge.GroupRun, knowledge.FleetKnowledge):
        monkeypatch.setattr(cls, "__setattr__", lambda self, name, value: object.__setattr__(
            self, name, words(value) if name in ("reason", "finding", "cross_finding") else value))
    real_verdict = fleet_verdicts.Verdict
    monkeypatch.setattr(fleet_verdicts, "Verdict", lambda *a, **k: replace(real_verdict(*a, **k), reason=text))


def test_the_released_fault_codes_and_causes_keep_their_names_and_places():
    """Append only: a drain reason written by an earlier gpuval names these codes, its records these causes."""
    faults = [(f.name, f.value) for f in FleetFault]
    assert faults[:len(RELEASED_FAULTS)] == [(code, code) for code in RELEASED_FAULTS]
    causes = [(c.name, c.value) for c in Cause]
    assert causes[:len(RELEASED_CAUSES)] == RELEASED_CAUSES


def test_a_failed_node_s_code_comes_from_its_cause():
    assert [fault_of(c).value for c in (Cause.SLOW, Cause.BROKEN, Cause.NODE_SLOW, Cause.NODE_CRASHED,
                                        Cause.HEALTH_FAILED, Cause.NVL_DOMAIN, Cause.GPUS_SLOW)] == RELEASED_FAULTS
    with pytest.raises(ValueError, match="undecided"):
        fault_of(Cause.UNDECIDED)


def test_the_representative_fleet_shows_every_cause_the_check_tells_apart():
    got = _check()[0]["nodes"]
    by_node = {n: got[n] for n in PLANTED}
    assert by_node == {
        "node00003": (Status.FAIL, Cause.BROKEN, ("FLEET_BROKEN",)),
        "node00010": (Status.FAIL, Cause.SLOW, ("FLEET_SLOW",)),
        "node00017": (Status.FAIL, Cause.NODE_SLOW, ("FLEET_NODE_SLOW",)),
        "node00024": (Status.FAIL, Cause.NODE_CRASHED, ("FLEET_NODE_CRASH",)),
        "node00035": (Status.WARN, Cause.FAILED_ONCE, ()),
        "node00038": (Status.FAIL, Cause.HEALTH_FAILED, ("ECC_UNCORRECTED",)),
        "node00045": (Status.FAIL, Cause.HEALTH_FAILED, ("FLEET_NODE_HEALTH",)),
        "node00052": (Status.WARN, Cause.HEALTH_WARNS, ()),
        "node00059": (Status.ERROR, Cause.HEALTH_NOT_RUN, ()),
        "node00066": (Status.ERROR, Cause.COULD_NOT_RUN, ()),
        "node00075": (Status.SKIPPED, Cause.UNDECIDED, ()),
        "node00082": (Status.FAIL, Cause.GPUS_SLOW, ("FLEET_NODE_SLOW_GPU",)),
    }
    others = {v for n, v in got.items() if n not in PLANTED}
    assert (Status.PASS, Cause.MEASURED, ()) in others


@pytest.mark.parametrize("text", ["lorem ipsum", ADVERSARIAL], ids=["nonsense", "adversarial"])
def test_every_reason_rewritten_gives_the_same_rounds_verdicts_causes_and_codes(monkeypatch, text):
    """The same fleet, the same noise: with every reason rewritten (into nonsense, or into the very words the
    check once decided on) the rounds, every verdict's status and cause, and every fault code are unchanged."""
    plain, _ = _check()
    _rewrite_every_reason(monkeypatch, text)
    rewritten, found = _check()
    every = [*found.nodes.values(), *found.links.values(), *found.uplinks.values(), *found.groups]
    assert {v.reason for v in every} | {e.reason for v in every for e in v.evidence} == {text}  # rewritten indeed
    assert rewritten == plain
