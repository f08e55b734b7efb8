"""The acting step of `gpuval jobs diagnose` (gpuval.workloads.diagnose.act) on diagnoses built from step records
(tests/diagnosis/test_comm.py's eight-rank job on four nodes): what `--retest` and `--retest --links` take, what
`--exclude` does with no node nominated, the exit code of what was asked, and the lines people read. The re-test
and the exclusion themselves run on real Slurm and kmock (test_comm_slurm.py, test_retest_slurm.py,
tests/engines/test_slurm_exclude.py, tests/engines/test_kubernetes_exclude.py)."""

from __future__ import annotations

from gpuval.cli.render import diagnosis_lines
from gpuval.diagnosis.comm import find_comm_slow
from gpuval.diagnosis.job_diagnosis import JobDiagnosis, Retest, RetestLink, RetestNode, Suspect
from gpuval.engines.exclude import ExcludeStep, Exclusion
from gpuval.engines.local import LocalEngine
from gpuval.results.model import Status
from gpuval.workloads.diagnose.act import act_exit, exclude, not_retested, retest_targets
from tests.diagnosis.test_comm import NODES, _baseline, _job

PROBED = {n: "" for n in sorted(set(NODES.values()))}


def _diag(records, baseline=None, suspects=()) -> JobDiagnosis:
    diag = JobDiagnosis("4242", "slurm", run_id="20261127T120000Z-0077ab", node_of=NODES, probed=dict(PROBED))
    diag.comm = find_comm_slow(records, NODES, baseline)
    diag.suspects = [Suspect(n, why=["straggler: ..."]) for n in suspects]
    return diag


def test_links_take_the_jobs_nodes_only_where_its_communication_is_slow():
    turned = _diag(_job(22, slow_from=14))
    assert retest_targets(turned, links=True) == (sorted(PROBED), "")
    assert retest_targets(turned, links=False) == ([], "the diagnosis nominates no node (communication slow "
                                                       "nominates the job's links, no node: --retest --links names it)")
    del turned.probed["node-3"]  # a node no probe answered for is not re-tested
    assert retest_targets(turned, links=True)[0] == ["node-0", "node-1", "node-2"]


def test_a_link_slow_from_the_start_is_judged_by_a_band_and_without_one_said_not_judged():
    """The job moves 64 MiB of bus bytes a step in 5 ms from its start: its own past shows nothing; a fleet band
    whose limit is 380 GB/s judges it slow (its links are re-tested), no band leaves it not judged, and `--retest
    --links` says so in its place instead of re-testing."""
    records = _job(22, bus=64 * 2**20)
    banded = _diag(records, _baseline(380, 32 * 2**20))
    assert banded.comm.outcome == "communication slow" and retest_targets(banded, links=True)[0] == sorted(PROBED)
    nodes, why = retest_targets(_diag(records), links=True)
    assert nodes == [] and why.startswith("the diagnosis does not find the job's communication slow (not "
                                          "communication slow: ")
    assert "bus bandwidth 13.42 GB/s, not judged: no SKU baseline or profile given (--sku, --profile)" in why


def test_exclude_without_a_nominated_node_sends_nothing_and_says_why():
    diag = _diag(_job(22, slow_from=14))
    done = exclude(LocalEngine(), diag)
    assert done.status is Status.ERROR and not done.steps and done.nodes == []
    assert done.advice == ("the diagnosis nominates no node: nothing to exclude (communication slow nominates the "
                           "job's links, no node: --retest --links names it)")


def test_the_exit_says_what_was_asked_and_not_done():
    diag = _diag(_job(22), suspects=["node-1"])
    assert act_exit(diag) == 0
    diag.exclusion = Exclusion("4242", "slurm", ["node-1"], ["node-1"], [ExcludeStep("x", ("true",))], sent=True)
    assert act_exit(diag) == 0
    diag.retest = Retest(diag.run_id, Status.FAIL, "re-test failed node-1")
    assert act_exit(diag) == 1
    diag.retest = not_retested(diag.run_id, "no known-good partner")
    assert act_exit(diag) == 2 and diag.retest.reason == "not re-tested: no known-good partner"
    diag.retest, diag.exclusion.problem = None, "scontrol release 4242: refused"
    assert act_exit(diag) == 2


def test_people_read_the_exclusion_and_the_link_a_retest_named():
    diag = _diag(_job(22, slow_from=14))
    diag.exclusion = Exclusion("4242", "slurm", ["node-1"], ["node-1"], advice="it was sent with --no-requeue")
    diag.retest = Retest(diag.run_id, Status.FAIL, "re-test failed link node-0<->node-1 (both its ends pass)",
                         [RetestNode("node-0", "suspect", Status.PASS, "passes with x1 (r2-retest-0)")],
                         failed_links=[RetestLink("node-0<->node-1", Status.FAIL, "slow: 80% under the fleet")],
                         links=True)
    lines = diagnosis_lines(diag)
    assert "  exclude node-1: not done: it was sent with --no-requeue" in lines
    assert f"  re-test of the job's links {diag.run_id}: fail: re-test failed link node-0<->node-1 (both its ends " \
           "pass)" in lines
    assert "    link node-0<->node-1: fail: slow: 80% under the fleet" in lines
