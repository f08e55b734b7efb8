"""The fleet Result factory, the outcome of a check (exit codes, fault codes, `--json`), and how the report's
diagnosis counts fleet records: a scripted fleet (scripted.py) (16 nodes) where n3 crashes with everyone, n5 is 20% slow and
n1<->n2 fails only together."""

from __future__ import annotations

from gpuval.diagnosis import diagnose
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED
from gpuval.results import Status
from gpuval.fleet.plan import Cause, new_fleet
from gpuval.fleet.plan import verdicts
from gpuval.fleet.plan.terms import Evidence, Test, TestResult, Verdict
from gpuval.fleet.run.outcome import FleetOutcome, RoundLog, fault_codes, with_unavailable
from gpuval.fleet.run.records import Origin, measurement_records, verdict_records
from tests.fleet import scripted

NODES = [f"n{i}" for i in range(1, 17)]


def _truth(kind: str, nodes: tuple[str, ...]) -> float | str:
    if kind == "node":
        return 1.0
    if "n3" in nodes:
        return "rank died"
    if "n5" in nodes:
        return 0.8
    return 0.8 if set(nodes) == {"n1", "n2"} else 1.0


def _check():
    return scripted.run_stored(NODES, _truth, seed=35)  # seed 35 screens n1 with n2


def test_every_measurement_is_stored_with_each_of_its_nodes():
    state, stored = _check()
    tests = {(r.where.hostname, r.params["test"]) for r in stored}
    for rnd in state.rounds:
        for t in rnd.tests:
            assert all((n, t.id) in tests for n in t.nodes), t
    screen = next(r for r in stored if r.params["purpose"] == "screen" and r.data.samples)
    assert screen.kind == "fleet" and screen.name == "test" and screen.data.role == "test"
    assert screen.data.samples["all_reduce"] and screen.metric("all_reduce_busbw").size_bytes == 1 << 30
    assert screen.data.evidence["shortfall"] is not None and screen.data.members == screen.params["nodes"]
    scale = [r for r in stored if r.params["purpose"] == "scale"]
    assert scale and all(r.data.members == [] and r.params["node_count"] == len(scale) for r in scale)


def test_verdict_records_and_what_the_report_counts():
    state, stored = _check()
    found = verdicts(state)
    status = {n: v.status for n, v in found.nodes.items()}
    assert status["n3"] is Status.FAIL and status["n5"] is Status.FAIL
    assert all(status[n] is Status.PASS for n in NODES if n not in ("n3", "n5"))
    codes = {n: fault_codes(v, []) for n, v in found.nodes.items()}
    assert codes["n3"] == ["FLEET_BROKEN"] and codes["n5"] == ["FLEET_SLOW"] and codes["n1"] == []
    final = list(verdict_records(found, "run-1", "slurm", codes=codes))
    causes = {r.where.hostname: r.data.model_dump()["cause"] for r in final if r.name == "node"}
    assert (causes["n3"], causes["n5"], causes["n1"]) == ("broken", "slow", "measured")
    link = found.links[("n1", "n2")]
    assert link.status is Status.FAIL and "fails only together" in link.reason
    ends = [r for r in final if r.name == "link" and r.data.subject == "n1<->n2"]
    assert sorted(r.where.hostname for r in ends) == ["n1", "n2"]  # a link is stored with both of its nodes
    [group] = [r for r in final if r.name == "group"]
    assert len(group.data.members) == 14 and group.where.hostname == group.data.members[0]
    # The diagnosis counts each node's fleet verdict, not the tests it took part in: n1 and n2 pass although a
    # test with them (their link) failed, and n3's partners pass although their pairs with n3 crashed.
    diag = {n.host: n.status for n in diagnose(stored + final).nodes}
    assert diag == status


def test_outcome_exit_codes_and_json():
    _, _ = _check()
    state, _ = _check()
    found = with_unavailable(verdicts(state), {"n9": "Slurm state down*"})
    codes = {n: fault_codes(v, []) for n, v in found.nodes.items()}
    outcome = FleetOutcome("run-1", "slurm", found, [RoundLog(0, {"suite": 8}, 1, 12.0)], {"n9": "down*"}, codes,
                           "n[3,5]")
    assert outcome.exit_code == EXIT_FAILED and outcome.failed == ["n3", "n5"]
    doc = outcome.to_json()
    assert [n["host"] for n in doc["nodes"]][:3] == ["n3", "n5", "n9"]  # fail, then error, then the rest
    assert doc["nodes"][2]["status"] == "error" and "not available" in doc["nodes"][2]["reason"]
    assert [n["cause"] for n in doc["nodes"][:3]] == ["broken", "slow", "could not run"]
    assert {e["cause"] for e in doc["nodes"][0]["evidence"]} >= {"crashed"}
    assert doc["links"][0] == {**doc["links"][0], "link": "n1<->n2", "hosts": ["n1", "n2"], "status": "fail"}
    assert doc["round_log"] == [{"round": 0, "tests": {"suite": 8}, "jobs": 1, "seconds": 12.0}]
    assert doc["exclude"] == "n[3,5]" and all("evidence" in n for n in doc["nodes"])
    only_error = with_unavailable(verdicts(new_fleet(["a", "b"])), {"c": "no such node"})
    assert FleetOutcome("r", "slurm", only_error, [], {}, {}, "").exit_code == EXIT_CANNOT_RUN


def test_health_codes_name_a_node_convicted_by_its_health_suite():
    ev = Evidence(Test("r0-suite-0", "node", ("n1",), 32, "suite"), 0, Status.FAIL, None, None, {}, "",
                  "health suite failed: ecc: 2 uncorrectable errors", cause=Cause.HEALTH_FAILED)
    v = Verdict("node", "n1", ("n1",), Status.FAIL, "node suite: health suite failed: ecc", (ev,),
                cause=Cause.HEALTH_FAILED)
    assert fault_codes(v, ["ECC_UNCORRECTED"]) == ["ECC_UNCORRECTED"]
    slow = Evidence(ev.test, 0, Status.FAIL, 0.3, 0.01, {}, "", "30% under the fleet", cause=Cause.SLOW)
    assert fault_codes(Verdict("node", "n1", ("n1",), Status.FAIL, "node suite: 30%", (slow, slow),
                               cause=Cause.NODE_SLOW), []) == ["FLEET_NODE_SLOW"]
    refused = measurement_records(ev.test, TestResult(ev.test.id, not_run="refused"), None,
                                  origin=Origin(run_id="r", engine="slurm"), size=1)
    assert refused[0].status is Status.ERROR
