"""`gpuval jobs diagnose --exclude --retest` on the session's real Slurm cluster (tests/helpers/slurm_session.py): a
job's symptom nominates a node, the job is requeued off it at once (isolate fast), and only the fleet's re-test of
it with known-good partners, run after, drains it (diagnose later: ByteRobust's practice).

The job is a plain sbatch of three tasks, on f1, f2 and f3, each a training loop timed by gpuval.hooks' StepTimer as
a user writes it (`with timer.step()`, `with timer.wait()` around its collective). Its step times are scripted, not
computed: the task on f3 spends 60 of each 100 ms computing and 40 waiting, the others 20 and 80, as a data-parallel
job with one slow node does (the detection itself is proven on real torchrun ranks slowed by a CPU quota,
test_slurm.py). This test's claim is what follows the nomination, a workflow: `--exclude` requeues the job (a batch
job gpuval did not send) held, sets its ExcNodeList to f3 and releases it, so the job lets go of f3 at once and Slurm
starts it again off f3; the re-test (partners f4 and f6, idle outside the job) then runs its tests without waiting
for the job and drains f3 alone, its reason carrying the diagnosis's run id; f1 and f2, in the same job but not
nominated, and the partners are left as they were. f3 is the fabric's broken node (its tasks are pointed at a
network interface that does not exist: every multi-node rank it starts crashes), so its conviction is a crash,
whatever the noise of this shared machine, in the fewest rounds; the re-test's judging of slowness is
tests/fleet/test_run_slurm.py's subject. The re-test polls every second (`--poll 1`) and is asked for at most 16
samples a test (`--max-samples`), with a cut so wide (a pair 10x slower than the fleet) that only the crash
convicts: the partners' pass is never at the mercy of a loaded machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_gpuval
from tests.helpers.slurm_session import FLEET_BROKEN

SUSPECT, HEALTHY, PARTNERS = FLEET_BROKEN, ["f1", "f2"], ["f4", "f6"]
LOOP = """
import os, sys, time
from gpuval.hooks import StepTimer

if int(os.environ.get("SLURM_RESTART_COUNT") or 0):  # started again off the suspect: where is all this test asks
    print("restarted on", os.environ["SLURMD_NODENAME"], flush=True)
    sys.exit()
compute = 0.06 if os.environ["SLURMD_NODENAME"] == sys.argv[1] else 0.02
timer = StepTimer(every=5, stacks=False)
for _ in range(int(sys.argv[2])):
    with timer.step():
        time.sleep(compute)
        with timer.wait():
            time.sleep(0.1 - compute)
timer.close()
"""


def _sbatch(cluster, *args: str) -> str:
    sent = subprocess.run(["sbatch", "--parsable", "--partition=fleet", *args], capture_output=True, text=True,
                          env=cluster.cmd_env(), timeout=30, check=True)
    return sent.stdout.strip().split(";")[0]


def _submit(cluster, tmp_path: Path, steps: int) -> str:
    """The job, on f1, f2 and f3 without naming them (a job that names a node, --nodelist, cannot be moved off it):
    f4, f5 and f6 are held by a placeholder job while it starts."""
    (tmp_path / "loop.py").write_text(LOOP)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun --label --ntasks-per-node=1 {sys.executable} {tmp_path / 'loop.py'} "
                      f"{SUSPECT} {steps}\n")
    hold = _sbatch(cluster, "--nodelist=f4,f5,f6", "--nodes=3", "--exclusive", "--output=/dev/null", "--wrap",
                   "sleep 300")
    try:
        _until(cluster, hold, lambda j: j["job_state"] == "RUNNING")
        job = _sbatch(cluster, "--nodes=3", f"--output={tmp_path / 'out.txt'}", str(script))
        placed = _until(cluster, job, lambda j: j["job_state"] == "RUNNING")
    finally:
        subprocess.run(["scancel", hold], env=cluster.cmd_env(), timeout=30)
    assert placed["nodes"] == "f[1-3]", placed["nodes"]
    return job


def _squeue(cluster, job: str) -> dict | None:
    """squeue's JSON of the job (22.05's `squeue --json` lists every job); None once squeue has forgotten it."""
    shown = subprocess.run(["squeue", "--json"], capture_output=True, text=True, env=cluster.cmd_env(), timeout=30,
                           check=True)
    return next((j for j in json.loads(shown.stdout)["jobs"] if str(j["job_id"]) == job), None)


def _until(cluster, job: str, ready) -> dict:
    deadline = time.monotonic() + 60
    while not ((found := _squeue(cluster, job)) and ready(found)):
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    return found


def _stepping(out: Path, job: str) -> None:
    """Until each task has printed a few step records (three windows judge a straggler)."""
    deadline = time.monotonic() + 90
    while (out.read_text().count("gpuval-step") if out.exists() else 0) < 15:
        assert time.monotonic() < deadline, f"job {job} printed no step records"
        time.sleep(1)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_job_is_requeued_off_its_nominated_node_which_only_its_failed_retest_drains(fabric, tmp_path):
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    job = _submit(fabric, tmp_path, steps=4000)  # 400 s: the re-test does not wait for it to end
    try:
        _stepping(tmp_path / "out.txt", job)
        proc = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--opt", "partition=fleet", "--json",
                          "--no-stacks", "--no-ras", "--exclude", "--retest", "--partners", ",".join(PARTNERS),
                          "--size", "256K", "--cut", "0.9", "--queue-timeout", "300", "--max-samples", "16",
                          "--poll", "1", env=env, timeout=450)
        after = _squeue(fabric, job)
    finally:
        subprocess.run(["scancel", job], env=fabric.cmd_env(), timeout=30)
    doc = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    assert proc.returncode == 1, (proc.stderr[-3000:] + json.dumps({k: doc.get(k) for k in (
        "suspects", "straggler", "comm", "placement_notes", "notes")}, default=str)[-6000:])
    assert [(s["node"], s["sources"]) for s in doc["suspects"]] == [(SUSPECT, ["straggler"])]
    moved = doc["exclusion"]
    assert moved["sent"] and not moved["problem"] and moved["excluded"] == [SUSPECT], moved
    assert [s["argv"][:2] for s in moved["steps"]] == [["scontrol", "requeuehold"], ["scontrol", "update"],
                                                        ["scontrol", "release"]]
    if after is not None:  # requeued once, off f3: pending (Slurm's requeue delay), or started again elsewhere
        assert after["excluded_nodes"] == SUSPECT and after["restart_cnt"] == 1, after
        assert SUSPECT not in after["nodes"], after
    else:  # started again (off f3) and ended already: its tasks said where
        restarted = re.findall(r"restarted on (\S+)", (tmp_path / "out.txt").read_text())
        assert len(restarted) == 3 and SUSPECT not in restarted, restarted
    retest = doc["retest"]
    rows = {n["node"]: (n["role"], n["status"], n["action"]) for n in retest["nodes"]}
    assert rows == {SUSPECT: ("suspect", "fail", "drained"), PARTNERS[0]: ("partner", "pass", "unchanged"),
                    PARTNERS[1]: ("partner", "pass", "unchanged")}, retest
    assert retest["run_id"] == doc["run_id"] and retest["status"] == "fail"
    suspect = fabric.node(SUSPECT)
    assert suspect.drained and suspect.reason.startswith(f"gpuval: FLEET_BROKEN {doc['run_id']}"), suspect
    for node in (*HEALTHY, *PARTNERS):
        assert not fabric.node(node).drained
    used = [int(n) for sent in (tmp_path / "jobs").rglob("job.sbatch")
            for n in re.findall(r"rank-test .*--samples (\d+)", sent.read_text())]
    assert used and max(used) <= 16  # --max-samples bounds the re-test's pair tests (uncapped: up to 43 here)
