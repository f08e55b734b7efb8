"""Moving a running job off nodes on the session's real Slurm 22.05 (`Engine.exclude`, engines/slurm/exclude.py), for
jobs gpuval did not send (plain sbatch and srun on the debug partition's n1 and n2): a requeueable batch job is
requeued held, its ExcNodeList set (its own exclusion kept) and released; a batch job sent with --no-requeue, an
interactive srun job, a job that named the node and a job its partition would have no room for off the nodes are
left as they are, with the exact exclude list and what to do; a step Slurm refuses after the requeue never leaves the job held. The whole `jobs
diagnose --exclude` is test_retest_slurm.py's."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from gpuval.engines.exclude import ExcludeStep, Exclusion
from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.slurm.exclude import send_exclude
from gpuval.results.model import Status

SLEEP = ["--partition=debug", "--nodes=1", "--ntasks=1", "--chdir=/tmp", "--output=/dev/null"]


def _sbatch(cluster, *args: str) -> str:
    sent = subprocess.run(["sbatch", "--parsable", *SLEEP, *args, "--wrap", "sleep 120"], capture_output=True,
                          text=True, env=cluster.cmd_env(), timeout=30, check=True)
    return sent.stdout.strip().split(";")[0]


def _job(cluster, job: str) -> dict:
    """squeue's JSON of one job (22.05's `squeue --json` lists every job, whatever --jobs says)."""
    [found] = [j for j in _all(cluster) if str(j["job_id"]) == job]
    return found


def _until(cluster, job: str, state: str) -> dict:
    deadline = time.monotonic() + 30
    while (found := _job(cluster, job))["job_state"] != state:
        assert time.monotonic() < deadline, found["job_state"]
        time.sleep(0.3)
    return found


def _running(cluster, job: str) -> str:
    return _until(cluster, job, "RUNNING")["nodes"]


@pytest.mark.timeout(120)
def test_a_batch_job_is_requeued_off_its_suspects_and_one_slurm_will_not_requeue_is_told_how(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    engine = SlurmEngine()
    moved, kept, broken = _sbatch(slurm, "--exclude=n3"), _sbatch(slurm, "--no-requeue"), _sbatch(slurm)
    named = _sbatch(slurm, "--nodelist=n1")
    interactive = subprocess.Popen(["srun", *SLEEP[:3], "sleep", "120"], env=slurm.cmd_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jobs = [moved, kept, broken, named]
    try:
        node = _running(slurm, moved)
        done = engine.exclude(moved, [node])
        assert done.status is Status.PASS and not done.advice, done
        assert [s.argv[1] for s in done.steps] == ["requeuehold", "update", "release"]
        now = _until(slurm, moved, "PENDING")  # once its processes have ended (COMPLETING first)
        assert now["restart_cnt"] == 1 and now["nodes"] == ""
        assert sorted(done.excluded) == sorted(["n3", node])
        assert f"ExcNodeList={now['excluded_nodes']}" in done.steps[1].what
        assert now["state_reason"] != "JobHeldUser" and "Priority=0 " not in slurm.scontrol("show", "job", moved)

        other = _running(slurm, kept)
        told = engine.exclude(kept, [other])
        assert told.status is Status.ERROR and not told.steps and not told.sent
        assert "--no-requeue" in told.advice and f"scancel {kept}" in told.advice
        assert f"sbatch --exclude={other} OPTIONS" in told.advice and _job(slurm, kept)["job_state"] == "RUNNING"

        deadline = time.monotonic() + 30
        while not (srun := [j for j in _all(slurm) if not j["batch_flag"] and j["job_state"] == "RUNNING"]):
            assert time.monotonic() < deadline, "the srun job did not start"
            time.sleep(0.3)
        jobs.append(str(srun[0]["job_id"]))
        told = engine.exclude(jobs[-1], [srun[0]["nodes"]])
        assert "only batch jobs" in told.advice and f"srun --exclude={srun[0]['nodes']}" in told.advice
        assert not told.sent and _job(slurm, jobs[-1])["job_state"] == "RUNNING"

        told = engine.render_exclude(named, ["n1"])  # running, or pending behind the others: Slurm keeps n1 for it
        assert "it asked for n1 by name (--nodelist=n1)" in told.advice and not told.steps

        _running(slurm, broken)
        stranded = engine.render_exclude(broken, ["n1", "n2"])  # the debug partition's every node
        assert not stranded.steps and "partition debug has 0 in service outside n[1-2]" in stranded.advice
        assert "Reason=BadConstraints" in stranded.advice
        refused = Exclusion(broken, "slurm", ["nosuch"], steps=[
            ExcludeStep("hold", ("scontrol", "requeuehold", broken)),
            ExcludeStep("exclude", ("scontrol", "update", f"JobId={broken}", "ExcNodeList=nosuch[")),
            ExcludeStep("release", ("scontrol", "release", broken))])
        send_exclude(refused)
        assert not refused.sent and "scontrol update" in refused.problem and "released again" in refused.problem
        assert "Priority=0 " not in slurm.scontrol("show", "job", broken)  # requeued, never left held
    finally:
        interactive.kill()
        subprocess.run(["scancel", *jobs], env=slurm.cmd_env(), timeout=30)


def _all(cluster) -> list[dict]:
    shown = subprocess.run(["squeue", "--json"], capture_output=True, text=True, env=cluster.cmd_env(), timeout=30,
                           check=True)
    return json.loads(shown.stdout)["jobs"]
