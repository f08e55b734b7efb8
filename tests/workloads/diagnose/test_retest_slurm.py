"""`gpuval jobs diagnose --retest` on the session's real Slurm cluster (tests/helpers/slurm_session.py): a job's
symptom nominates a node, and only the fleet's re-test of it with known-good partners drains it.

The job is a plain sbatch of three tasks, on f1, f2 and f3, each a training loop timed by gpuval.hooks' StepTimer as
a user writes it (`with timer.step()`, `with timer.wait()` around its collective). Its step times are scripted, not
computed: the task on f3 spends 60 of each 100 ms computing and 40 waiting, the others 20 and 80, as a data-parallel
job with one slow node does (the detection itself is proven on real torchrun ranks slowed by a CPU quota,
test_slurm.py). This test's claim is what follows the nomination, a workflow: the re-test (partners f4 and f6, idle
outside the job) waits for the job to let go of f3, runs its tests, and drains f3 alone, its reason carrying the
diagnosis's run id; f1 and f2, in the same job but not nominated, and the partners are left as they were. f3 is the
fabric's broken node (its tasks are pointed at a network interface that does not exist: every multi-node rank it
starts crashes), so its conviction is a crash, whatever the noise of this shared machine, in the fewest rounds; the
re-test's judging of slowness is tests/fleet/test_run_slurm.py's subject. The re-test polls every second
(`--poll 1`) and is asked for at most 16 samples a test (`--max-samples`).
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

compute = 0.06 if os.environ["SLURMD_NODENAME"] == sys.argv[1] else 0.02
timer = StepTimer(every=5, stacks=False)
for _ in range(int(sys.argv[2])):
    with timer.step():
        time.sleep(compute)
        with timer.wait():
            time.sleep(0.1 - compute)
timer.close()
"""






def _submit(cluster, tmp_path: Path, steps: int) -> str:
    (tmp_path / "loop.py").write_text(LOOP)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun --label --ntasks-per-node=1 {sys.executable} {tmp_path / 'loop.py'} "
                      f"{SUSPECT} {steps}\n")
    nodes = ",".join([*HEALTHY, SUSPECT])
    sent = subprocess.run(["sbatch", "--parsable", "--partition=fleet", f"--nodelist={nodes}", "--nodes=3",
                           f"--output={tmp_path / 'out.txt'}", str(script)], capture_output=True, text=True,
                          env=cluster.cmd_env(), timeout=30, check=True)
    return sent.stdout.strip().split(";")[0]


def _stepping(out: Path, job: str) -> None:
    """Until each task has printed a few step records (three windows judge a straggler)."""
    deadline = time.monotonic() + 90
    while (out.read_text().count("gpuval-step") if out.exists() else 0) < 15:
        assert time.monotonic() < deadline, f"job {job} printed no step records"
        time.sleep(1)


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_the_nominated_node_is_drained_only_by_its_failed_retest_and_its_job_mate_is_untouched(fabric, tmp_path):
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    job = _submit(fabric, tmp_path, steps=250)  # 25 s: the re-test's tests queue until the job ends
    try:
        _stepping(tmp_path / "out.txt", job)
        proc = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--opt", "partition=fleet", "--json",
                          "--no-stacks", "--no-ras", "--retest", "--partners", ",".join(PARTNERS), "--size", "256K",
                          "--cut", "0.5", "--queue-timeout", "300", "--max-samples", "16", "--poll", "1", env=env,
                          timeout=450)
    finally:
        subprocess.run(["scancel", job], env=fabric.cmd_env(), timeout=30)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [(s["node"], s["sources"]) for s in doc["suspects"]] == [(SUSPECT, ["straggler"])]
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
