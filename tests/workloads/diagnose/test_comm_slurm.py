"""A link that turns slow under a running job, on the session's real Slurm cluster (tests/helpers/slurm_session.py):
`gpuval jobs diagnose` says "communication slow" within two minutes of the change, and said nothing of the kind
while the link was healthy; `--retest --links` then names the node whose link it is, and drains only it.

The job: a plain sbatch of two tasks on f1 and f5 of the fleet partition, which sit on the test fabric
(tests/helpers/slurm_fabric.py: f5's slurmd is in a network namespace of its own behind a veth pair shaped by tc,
200 Mbit/s; f1 is on the host's end). Each task is a training loop as a user writes it: a real gloo all-reduce of
128 KiB between the two nodes, over the fabric, timed with `timer.wait(nbytes=...)` after 100 ms of compute. Once the
diagnosis has judged the healthy job, f5's link is shaped to 2.5 Mbit/s in both directions (80 times slower; tc
qdisc change, live): every all-reduce now takes about 0.4 s on both ranks, and neither computes longer.

The re-test: the diagnosis nominates the job's links (f1 and f5), no node; `--retest --links --partners f4,f6` hands
both to the fleet's re-test with those known-good partners from outside the job. Its tests of f1 and f5 queue until
the job lets go of them: the test cancels the job once they are queued, and gives f5's link back its 200 Mbit/s
(still far under the loopback f1, f4 and f6 talk over: the rig's slow node for the fleet at either rate; at 2.5
Mbit/s each pair test would take minutes). f5 fails with its partners and is drained with the diagnosis's run id;
f1, whose every pair test without f5 passes, and the partners are left as they were.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuval.node.dist_env import free_port
from tests.conftest import run_gpuval

NODES = ["f1", "f5"]  # f5 behind its shaped link (FLEET_SLOW)
PARTNERS = ["f4", "f6"]
RETEST = ["--retest", "--links", "--partners", ",".join(PARTNERS), "--size", "256K", "--cut", "0.5",
          "--queue-timeout", "300", "--max-samples", "16", "--poll", "1"]
HEALTHY, SLOW = "200mbit", "2500kbit"
EVERY = 5
LOOP = """
import os, sys, time
import torch, torch.distributed as dist
from gpuval.hooks import StepTimer

dist.init_process_group("gloo", init_method=f"tcp://{sys.argv[1]}:{sys.argv[2]}",
                        rank=int(os.environ["SLURM_PROCID"]), world_size=int(os.environ["SLURM_NTASKS"]))
grads = torch.ones(32768)
timer = StepTimer(every=int(sys.argv[3]), stacks=False)
while True:
    with timer.step():
        time.sleep(0.1)
        with timer.wait(nbytes=grads.numel() * grads.element_size()):
            dist.all_reduce(grads)
"""


def _submit(cluster, tmp_path: Path) -> str:
    (tmp_path / "loop.py").write_text(LOOP)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nsrun --label --ntasks-per-node=1 {sys.executable} {tmp_path / 'loop.py'} "
                      f"{cluster.node_addr(NODES[0])} {free_port()} {EVERY}\n")
    sent = subprocess.run(["sbatch", "--parsable", "--partition=fleet", f"--nodelist={','.join(NODES)}",
                           "--nodes=2", f"--output={tmp_path / 'out.txt'}", str(script)], capture_output=True,
                          text=True, env=cluster.cmd_env(), timeout=30, check=True)
    return sent.stdout.strip().split(";")[0]


def _windows(out: Path) -> int:
    """Step records printed so far, per rank."""
    return (out.read_text().count("gpuval-step") if out.exists() else 0) // len(NODES)


def _until_windows(out: Path, count: int, job: str, within: float) -> None:
    deadline = time.monotonic() + within
    while _windows(out) < count:
        assert time.monotonic() < deadline, f"job {job}: {_windows(out)} windows, {count} awaited"
        time.sleep(0.5)


def _diagnose(job: str, env: dict[str, str]) -> dict:
    proc = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--opt", "partition=fleet", "--json", "--no-stacks",
                      "--no-ras", env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _retest_links(cluster, job: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`--retest --links` on the slow job; once its re-test's tests are queued (a job of the fleet partition other
    than ours: one test at a time uses the session's cluster), the job is cancelled and f5's link given back."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_gpuval, "jobs", "diagnose", job, "--on", "slurm", "--opt", "partition=fleet",
                              "--json", "--no-stacks", "--no-ras", *RETEST, env=env, timeout=280)
        deadline = time.monotonic() + 150
        while not running.done() and not _others(cluster, job):
            assert time.monotonic() < deadline, "the re-test queued no test"
            time.sleep(1)
        cluster.set_rate("f5", HEALTHY)
        subprocess.run(["scancel", job], env=cluster.cmd_env(), timeout=30)
        return running.result()


def _others(cluster, job: str) -> list[str]:
    shown = subprocess.run(["squeue", "-h", "-p", "fleet", "-o", "%i"], capture_output=True, text=True,
                           env=cluster.cmd_env(), timeout=30)
    return [j for j in shown.stdout.split() if j != job]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_link_that_turns_slow_is_communication_slow_and_its_retest_drains_only_its_node(fabric, tmp_path):
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    out = tmp_path / "out.txt"
    job = _submit(fabric, tmp_path)
    try:
        _until_windows(out, 12, job, within=120)
        healthy = _diagnose(job, env)
        comm = healthy["comm"]
        assert comm["outcome"] == "none" and comm["suspect"] is None, comm["reason"]
        assert comm["bandwidth"]["gbps"] > 0 and "not judged: no SKU baseline" in comm["bandwidth"]["reason"]
        fabric.set_rate("f5", SLOW)
        changed, seen = time.monotonic(), _windows(out)
        _until_windows(out, seen + 7, job, within=110)
        while True:
            slow = _diagnose(job, env)
            if slow["comm"]["outcome"] == "communication slow" or time.monotonic() - changed > 120:
                break
        took = time.monotonic() - changed
        assert slow["comm"]["outcome"] == "communication slow" and took < 120, (took, slow["comm"]["reason"])
        retested = _retest_links(fabric, job, env)
    finally:
        fabric.set_rate("f5", HEALTHY)
        subprocess.run(["scancel", job], env=fabric.cmd_env(), timeout=30)
    comm = slow["comm"]
    assert comm["suspect"]["kind"] == "links" and comm["suspect"]["nodes"] == NODES
    assert comm["lost_s"] > 1.0 and comm["since_step"] is not None
    assert slow["suspects"] == []  # the rule names no node; the job's links are the suspect
    assert retested.returncode == 1, retested.stderr[-3000:]
    doc = json.loads(retested.stdout)
    assert doc["comm"]["outcome"] == "communication slow" and doc["suspects"] == []
    again = doc["retest"]
    rows = {n["node"]: (n["role"], n["status"], n["action"]) for n in again["nodes"]}
    assert again["links"] and again["status"] == "fail" and again["run_id"] == doc["run_id"], again
    assert rows == {"f5": ("suspect", "fail", "drained"), "f1": ("suspect", "pass", "unchanged"),
                    **{p: ("partner", "pass", "unchanged") for p in PARTNERS}}, again
    slow = fabric.node("f5")
    assert slow.drained and slow.reason.startswith(f"gpuval: FLEET_SLOW {doc['run_id']}"), slow
    for node in ("f1", *PARTNERS):
        assert not fabric.node(node).drained
