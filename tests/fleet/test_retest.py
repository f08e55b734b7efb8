"""The one re-test's request check and partner choice (gpuval.fleet.act.retests), for both commands. A site here is a
list of idle nodes behind the methods the choice calls, `pick(count)`, which (as the Slurm and Kubernetes sites do)
gives exactly `count` nodes or refuses, and `expand`; the re-tests themselves run on real Slurm and kmock
(test_retest_slurm.py, test_retest_kubernetes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuval.engines import node_client
from gpuval.errors import UsageError
from gpuval.fleet.act.retests import (
    RetestRequest, Retested, Retests, _by_settings, _decide, check_request, choose_partners, retest_links,
    retest_suspects,
)
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.terms import FleetVerdicts, Verdict
from gpuval.fleet.run.outcome import FleetOutcome
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Conviction, write_bundle
from gpuval.operate.held import Held
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status

JOB = ["d1", "d2", "d3", "d4"]
RUN = "20261127T120000Z-0077ab"


@dataclass
class Idle:
    nodes: list[str]

    def pick(self, count: int) -> list[str]:
        if len(self.nodes) < count:
            raise UsageError(f"--nodes {count}: {len(self.nodes)} idle nodes")
        return self.nodes[:count]


def _choose(idle: list[str], named: list[str] = (), job: list[str] = JOB, count: int = 2) -> tuple[list[str], str]:
    return choose_partners(Idle(idle), list(named), ["d3"], "77", job, count)  # type: ignore[arg-type]


def test_named_partners_are_taken_less_the_nodes_under_retest():
    assert _choose(["x1", "x2"], ["d1"]) == (["d1"], "named with --partners")
    assert _choose([], ["d1", "d3"]) == (["d1"], "named with --partners")
    with pytest.raises(UsageError, match="no known-good partner for d3: no named node in service"):
        _choose(["x1"], ["d3"])


@pytest.mark.parametrize(("idle", "chosen"), [
    (["x1", "x2", "x3"], ["x1", "x2"]),
    (["x1"], ["x1"]),  # one idle node is a partner (before: asked for 7, refused, the job's own nodes taken)
    (["d1", "d2", "x1", "x2"], ["x1", "x2"]),  # a site that offers the job's own nodes: skipped
])
def test_idle_nodes_outside_the_job_come_first(idle, chosen):
    assert _choose(idle) == (chosen, "idle nodes outside the job")


def test_a_held_retest_takes_three_idle_nodes_it_does_not_hold():
    """Slurm lists a drained node as idle: the held nodes are skipped as a job's are."""
    assert choose_partners(Idle(["d3", "x1", "x2", "x3", "x4"]), [], ["d3"], "", [], 3) == (
        ["x1", "x2", "x3"], "idle nodes the engine offers")


def test_without_idle_nodes_the_jobs_own_other_nodes_are_partners_and_none_at_all_is_refused():
    assert _choose([]) == (["d1", "d2"], "the job's own nodes: their tests wait until the job has ended")
    with pytest.raises(UsageError, match="no known-good partner for d3: no idle node in service and no other node "
                                         "in job 77; name one with --partners"):
        _choose([], job=["d3"])


def test_a_request_is_checked_before_anything_runs():
    """What `jobs diagnose --retest` may check before its diagnosis: every bad value one line, nothing sent."""
    good = dict(on="slurm", run_id=RUN, job_id="77", job_nodes=JOB)
    check_request(RetestRequest(**good, partners="d[1-2]"))
    for bad, message in (({"cut": 1.5}, "--cut 1.5"), ({"cut": float("nan")}, "--cut nan"), ({"size": 0}, "--size 0"),
                         ({"run_id": "x\ny"}, "--run-id 'x\\\\ny'"), ({"on": "pbs"}, "pbs"),
                         ({"partners": "d3", "suspects": ["d3"]}, "d3: a suspect cannot be its own known-good"),
                         ({"partners": "d[1-999999999]"}, "node list")):
        with pytest.raises(UsageError, match=message):
            check_request(RetestRequest(**{**good, **bad}))


def test_a_diagnosis_that_nominates_nobody_is_not_retested():
    with pytest.raises(UsageError, match="job 77's diagnosis nominates no node: nothing to re-test"):
        retest_suspects(RetestRequest(on="slurm", run_id=RUN, job_id="77", job_nodes=JOB))


def test_the_links_entry_point_names_a_link_that_failed_while_both_its_ends_passed():
    """`retest_links` is the one re-test with every node of the job's links under re-test: nothing nominated is
    refused before anything runs; the re-test's report names a failed link of theirs (a partner-only link is not
    the job's), and that failure is the re-test's."""
    with pytest.raises(UsageError, match="job 77's diagnosis names none of its links: nothing to re-test"):
        retest_links(RetestRequest(on="slurm", run_id=RUN, job_id="77", job_nodes=JOB))
    node = {n: Verdict("node", n, (n,), Status.PASS, "passes with x1", cause=Cause.MEASURED) for n in ("d1", "d2")}
    link = {("d1", "d2"): Verdict("link", "d1<->d2", ("d1", "d2"), Status.FAIL, "slow: 40% under the fleet",
                                  cause=Cause.SLOW),
            ("x1", "x2"): Verdict("link", "x1<->x2", ("x1", "x2"), Status.FAIL, "slow", cause=Cause.SLOW)}
    outcome = FleetOutcome(RUN, "slurm", FleetVerdicts(node, link, {}, (), 4), [], {}, {}, "")
    done = Retests(RUN, ["x1", "x2"], "named with --partners", [outcome], [
        Retested("suspect", Status.PASS, "passes with x1", NodeAction("slurm", n, Status.PASS, Acted.UNCHANGED, ""))
        for n in ("d1", "d2")], links=True)
    shown = done.for_diagnosis("77")
    assert shown.status is Status.FAIL and shown.links
    assert shown.reason == "re-test failed link d1<->d2 (both its ends pass)"
    assert [(k.link, k.status) for k in shown.failed_links] == [("d1<->d2", Status.FAIL)]


def test_a_node_held_for_slow_gpus_stays_held_when_its_retest_could_not_compare_its_gpu_figures():
    """Held for FLEET_NODE_SLOW_GPU, its re-test passed on the network but had too few nodes of its GPU model to judge
    its GPU figures against (its partners of another model): what held it is not re-checked, so it is kept (the exit
    contract's 2: not lifted), and the action says why and what to do. Nothing is asked of the scheduler: the node
    client (Slurm's, real) is not called on this path."""
    node = "g1"
    passed = Verdict("node", node, (node,), Status.PASS, "passes with p1 (r1-screen-0)", cause=Cause.MEASURED)
    found = FleetVerdicts({node: passed}, {}, {}, (), 3, gpus_not_compared=frozenset({node}))
    outcome = FleetOutcome(RUN, "slurm", found, [], {}, {}, "")
    held = Held(node, "slurm", f"gpuval: FLEET_NODE_SLOW_GPU {RUN}", ("FLEET_NODE_SLOW_GPU",), (), RUN, None)
    done = _decide(node_client("slurm"), held, outcome, RUN)
    assert done.action.action is Acted.KEPT and done.standing is Status.ERROR
    assert "its GPU figures were not judged against the fleet" in done.action.detail
    assert "FLEET_NODE_SLOW_GPU is not re-checked; name partners of its model with --partners" in done.action.detail


def test_r6_a_held_node_whose_bundle_cannot_be_read_is_kept_and_the_others_are_still_retested(tmp_path: Path):
    """Red team 6 R6: n1's bundle cut to 200 bytes made `gpuval fleet retest` stop (exit 2, "not valid YAML")
    before it re-tested n2, whose bundle is whole. n1 is now left drained as a node without a bundle is (a person
    lifts it), with the one-line reason, and standing ERROR (the exit contract's 2: not re-tested); n2 is taken for
    the re-test with the settings its bundle kept. The bundles are the fleet's own writer's; the node client is
    Slurm's, not called on this path."""
    fleet = {"codes": ["FLEET_NODE_CRASH"], "settings": {"iters": 5, "sizes": {"single": 65536, "multi": 65536}}}
    for node in ("n1", "n2"):
        action = NodeAction("slurm", node, Status.FAIL, Acted.DRAINED, "fleet")
        bundle = write_bundle(tmp_path, None, "fleet check", Conviction(RUN, [], [], action, fleet))
    cut = tmp_path / "evidence" / "n1" / f"{RUN}.yaml"
    cut.write_bytes(cut.read_bytes()[:200])
    held = [Held(n, "slurm", f"gpuval: FLEET_NODE_CRASH {RUN}", ("FLEET_NODE_CRASH",), (), RUN, None)
            for n in ("n1", "n2")]
    left: list[Retested] = []
    groups = _by_settings(node_client("slurm"), tmp_path, held, left)
    assert [[h.node for h in group] for group in groups.values()] == [["n2"]] and bundle.parent.name == "n2"
    [n1] = left
    assert (n1.node, n1.action.action, n1.standing) == ("n1", Acted.KEPT, Status.ERROR)
    assert n1.action.detail.startswith(f"its evidence bundle cannot be read here ({cut}: ") and "\n" not in \
        n1.action.detail and n1.action.detail.endswith("): a person lifts it"), n1.action.detail
