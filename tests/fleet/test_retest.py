"""The partners of `gpuval jobs diagnose --retest` (gpuval.fleet.retest.choose_partners). A site here is a list of
idle nodes behind the one method the choice calls, `pick(count)`, which (as the Slurm and Kubernetes sites do)
gives exactly `count` nodes or refuses; the re-test itself runs on real Slurm (tests/workloads/diagnose)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuval.errors import UsageError
from gpuval.fleet.retest import RetestRequest, choose_partners, retest

JOB = ["d1", "d2", "d3", "d4"]


@dataclass
class Idle:
    nodes: list[str]

    def pick(self, count: int) -> list[str]:
        if len(self.nodes) < count:
            raise UsageError(f"--nodes {count}: {len(self.nodes)} idle nodes")
        return self.nodes[:count]


def _req(**more) -> RetestRequest:
    return RetestRequest("slurm", {}, "77", JOB, ["d3"], "20261127T120000Z-0077ab", **more)


def test_named_partners_are_taken_and_a_suspect_is_never_its_own_partner():
    assert choose_partners(Idle(["x1", "x2"]), _req(partners=["d1"])) == (["d1"], "named with --partners")
    with pytest.raises(UsageError, match="d3: a suspect cannot be its own known-good partner"):
        choose_partners(Idle([]), _req(partners=["d1", "d3"]))


@pytest.mark.parametrize(("idle", "chosen"), [
    (["x1", "x2", "x3"], ["x1", "x2"]),
    (["x1"], ["x1"]),  # one idle node is a partner (before: asked for 7, refused, the job's own nodes taken)
    (["d1", "d2", "x1", "x2"], ["x1", "x2"]),  # a site that offers the job's own nodes: skipped
])
def test_idle_nodes_outside_the_job_come_first(idle, chosen):
    assert choose_partners(Idle(idle), _req()) == (chosen, "idle nodes outside the job")


def test_without_idle_nodes_the_jobs_own_other_nodes_are_partners_and_none_at_all_is_refused():
    assert choose_partners(Idle([]), _req()) == (
        ["d1", "d2"], "the job's own nodes: their tests wait until the job has ended")
    lone = RetestRequest("slurm", {}, "78", ["d3"], ["d3"], "20261127T120000Z-0078ab")
    with pytest.raises(UsageError, match="no partner for d3: no idle node and no other node in job 78"):
        choose_partners(Idle([]), lone)


def test_a_diagnosis_that_nominates_nobody_is_not_retested():
    with pytest.raises(UsageError, match="job 77's diagnosis nominates no node: nothing to re-test"):
        retest(RetestRequest("slurm", {}, "77", JOB, [], "20261127T120000Z-0077ab"))
