"""`gpuval jobs diagnose --on slurm` against real Slurm daemons: a cluster of four fake nodes on this host whose tasks
each get their node's own /tmp (tests/helpers/slurm_jobs.py: a cluster-wide TaskProlog, so the cluster is this
module's own), real `gpuval train` jobs (torchrun under srun, gloo on CPU, gpuval.hooks' step timer in every rank),
and probe steps inside each job (`srun --jobid J --overlap`).

- One 4-node job for two claims (a job's start costs about a minute on this 2-core machine):
  - a slow node: once the job trains, d3's processes are held to 15% of every 40 ms (NodeQuota: a CPU quota
    enforced the way a cgroup's cpu.max is, by stopping and continuing them; this sandbox has no cgroups). Its rank
    computes several times longer and waits least; the diagnosis names d3 within two minutes of the job's start,
    and changes no node.
  - a hang: the quota lifted, one rank on d4 stopped with SIGSTOP; no rank progresses, and the diagnosis names that
    rank and d4 from the ranks' state files and stacks.
- A job without the timer and not sent by gpuval (plain sbatch with `srun --label`): its NCCL_DEBUG lines (a real
  log of each network, printed by each node's task) are read per node, and each node's driver events; then its
  second node's slurmd is killed (a node lost mid-job), and the diagnosis nominates that node as unreachable.
- What the job's user (`nobody`) plants on a node never acts with the operator's (root's) rights (reliability-4
  D1-D4: a hooks folder made first, links, a forged state file, a `gpuval/` in root's folder), and root is refused
  nobody's job in one line; a job not sent by gpuval has its labels read with its step's own layout (D5). A plain
  sleeping process and a short timed one, not a training run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.engines.slurm.engine import SlurmEngine
from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import DATA, run_gpuval
from tests.helpers.planted import PLANT, TIMED, plant_gpuval
from tests.helpers.slurm_jobs import NodeQuota, NodeTmpCluster, node_pids

NODES = ["d1", "d2", "d3", "d4"]
SLOW = "d3"
# A small, compute-bound step (about 0.1 s a rank here; one thread a rank on this 2-core machine), a step record
# every 5 steps (three windows judge a straggler).
TRAIN = ["--env", "OMP_NUM_THREADS=1", "--", "--batch-size", "64", "--image-size", "16", "--step-report", "5"]


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-diagnose-"))
    try:
        with NodeTmpCluster(root, nodes=NODES, min_job_age=2) as started:
            yield started
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def env(cluster, tmp_path: Path) -> dict[str, str]:
    return {**cluster.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}


def _submit(env: dict[str, str], nodes: int, steps: int) -> str:
    proc = run_gpuval("submit", "train", "--on", "slurm", "--nodes", str(nodes), "--json", *TRAIN, "--steps",
                      str(steps), env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["job_id"]


def _diagnose(env: dict[str, str], job: str, *more: str, timeout: float = 120) -> dict:
    proc = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--json", *more, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _named_in_two_minutes(cluster, env: dict[str, str], job: str, started: float) -> dict:
    doc = {"suspects": []}
    while not doc["suspects"] and time.monotonic() - started < 120:
        time.sleep(4)
        doc = _diagnose(env, job, "--no-stacks")  # stacks are the hang's: py-spy on every rank only loads the nodes
    took = time.monotonic() - started
    assert [s["node"] for s in doc["suspects"]] == [SLOW], (doc["straggler"]["reason"], took)
    [slow] = doc["straggler"]["stragglers"]
    assert slow["node"] == SLOW and doc["node_of"][str(slow["rank"])] == SLOW
    assert slow["compute_s"] > 1.5 * slow["center_s"] and slow["wait_s"] < slow["wait_center_s"]
    assert doc["straggler"]["lost_s"] > 0 and doc["suspects"][0]["sources"] == ["straggler"]
    # NodeQuota stops d3's processes: not runnable, so no run queue or steal shows it; its rank's CPU time does
    assert slow["cause"] == "host side (off CPU)" and doc["comm"]["outcome"] != "communication slow", slow
    assert sorted(doc["probed"]) == NODES and not any(doc["probed"].values())
    assert not cluster.drained()  # a diagnosis without --retest leaves every node as it was
    stored = open_store(os.environ["GPUVAL_DB"]).results(Query(run_ids=[doc["run_id"]]))
    assert {r.where.hostname for r in stored if r.kind == "job"} == set(NODES)
    assert all(r.where.job_id == job for r in stored)
    print(f"named {SLOW} {took:.0f} s after the job was sent")
    return doc


def _hang_named(env: dict[str, str], job: str, node_of: dict[str, str], node: str) -> None:
    """One rank on `node` stopped: no rank progresses; the diagnosis names that rank and node from the ranks'
    state files and stacks."""
    rank = next(int(r) for r, n in node_of.items() if n == node)
    stopped = _rank_pid(node, rank)
    assert stopped, f"no process of rank {rank} on {node}"
    os.kill(stopped, signal.SIGSTOP)
    try:
        time.sleep(10)
        for _ in range(3):  # a node's probe that failed (a loaded host) says nothing of the claim: asked again
            doc = _diagnose(env, job, "--stall", "6")
            if not any(doc["probed"].values()):
                break
        assert not any(doc["probed"].values()), doc["probed"]
    finally:
        os.kill(stopped, signal.SIGCONT)
    hang = doc["hang"]
    assert hang["outcome"] == "hang", hang["reason"]
    keys = ("rank", "node", "state", "launched", "completed", "in_collective", "frame", "collective", "why")
    assert len(hang["waited_for"]) == 1, json.dumps({"reason": hang["reason"], "notes": hang["notes"], "ranks": [
        {k: r[k] for k in keys} for r in hang["ranks"]], "waited_for": [r["why"] for r in hang["waited_for"]]})
    [waited] = hang["waited_for"]
    assert (waited["rank"], waited["node"], waited["pid"]) == (rank, node, stopped)
    assert "stopped" in waited["why"]
    assert [s["sources"] for s in doc["suspects"] if s["node"] == node] == [["hang"]]
    others = [r for r in hang["ranks"] if r["rank"] != rank]
    assert others and all(r["node"] == node_of[str(r["rank"])] != node for r in others)
    stacks = hang["stacks"]
    assert set(stacks) == set(node_of) and all(s["threads"] or s["problem"] for s in stacks.values())
    assert any(s["threads"] for s in stacks.values())


def _training(env: dict[str, str], job: str, started: float) -> None:
    """Until the job's output has a step record: its ranks are up and stepping."""
    while "gpuval-step" not in run_gpuval("jobs", "logs", job, "--on", "slurm", env=env, timeout=60).stdout:
        assert time.monotonic() - started < 110, "no step record in the job's output"
        time.sleep(2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_slow_node_is_named_in_two_minutes_and_a_stopped_rank_hangs_the_job_named_with_its_node(cluster, env):
    """One 4-node job for both claims (a job's start costs about a minute here). d3 slows once the job trains (a
    node that slows mid-job; a quota from the start would also slow its ranks' start, the import of torch, which
    says nothing of the diagnosis) and is named within two minutes of the job's start; then the quota is lifted
    while one rank on another node is stopped (the quota's own stops would be read as stopped ranks too). Neither
    diagnosis changes any node."""
    started = time.monotonic()
    job = _submit(env, 4, 100000)
    try:
        _training(env, job, started)
        with NodeQuota(SLOW, share=0.15) as quota:
            doc = _named_in_two_minutes(cluster, env, job, started)
            with quota.lifted():
                _hang_named(env, job, doc["node_of"], "d4")
        assert not cluster.drained()
    finally:
        cluster.command("scancel", job, check=False)


def _rank_pid(node: str, rank: int) -> int | None:
    """The training process of `rank` on `node` (torchrun sets RANK in its workers only)."""
    for pid in node_pids(node):
        try:
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return pid
        except OSError:
            continue
    return None


def _a_lost_node_is_nominated(cluster, env: dict[str, str], job: str, first: str, second: str) -> None:
    """`second`'s slurmd killed mid-job (a node that hangs or loses power): Slurm still runs the job and reaches
    `first`, not `second`; the diagnosis says why per node and nominates `second` as unreachable (a nomination,
    never a drain), beside `first`'s sockets."""
    started = cluster.lose_node(second)
    try:
        doc = _diagnose(env, job, "--sku", "Standard_ND96isr_H100_v5", "--no-stacks", "--no-ras")
    finally:
        cluster.restore_node(second, started)
    assert doc["probed"][first] == "" and doc["probed"][second].startswith(f"srun on {second}: ")
    suspects = {s["node"]: s for s in doc["suspects"]}
    assert suspects[first]["sources"] == ["transport"] and suspects[second]["sources"] == ["unreachable"]
    assert suspects[second]["why"] == [f"did not answer inside the job while 1 other node(s) of it did: "
                                       f"{doc['probed'][second]}"]
    assert not cluster.drained()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_job_without_the_timer_still_has_its_network_and_events_read_per_node(cluster, env, tmp_path):
    """Not gpuval's job: sbatch of `srun --label`, each node's task printing a real NCCL log (tests/data/nccl-debug:
    TCP sockets on the first node, InfiniBand on the second). With the H100 SKU's eight HCAs, sockets fail d-node
    one only; no step record and no rank state, so stragglers and hangs are not judged. Then the second node is
    lost mid-job and nominated as unreachable."""
    logs = DATA / "nccl-debug"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun --label --ntasks-per-node=1 bash -c 'if [ $SLURM_NODEID = 0 ]; then cat "
                      f"{logs / 'socket-ib-disabled-azureml.log'}; else cat {logs / 'ib-roce-dgxh100.log'}; fi; "
                      "exec sleep 300'\n")
    sent = subprocess.run(["sbatch", "--parsable", "--nodes=2", f"--output={tmp_path / 'out.txt'}", str(script)],
                          capture_output=True, text=True, env=cluster.cmd_env(), timeout=30)
    job = sent.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while (tmp_path / "out.txt").read_text().count("Using network") < 2 if (tmp_path / "out.txt").exists() \
                else True:
            assert time.monotonic() < deadline
            time.sleep(1)
        doc = _diagnose(env, job, "--sku", "Standard_ND96isr_H100_v5")
        nodes = cluster.command("squeue", "-h", "-j", job, "-o", "%N", check=False).strip()
        first, second = cluster.command("scontrol", "show", "hostnames", nodes, check=False).split()
        watched = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--watch", "--interval", "1", "--watch-for",
                             "8", "--no-stacks", "--no-ras", env=env, timeout=120)
        _a_lost_node_is_nominated(cluster, env, job, first, second)
    finally:
        cluster.command("scancel", job, check=False)
    transport = {t["node"]: t for t in doc["transport"]}
    assert (transport[first]["status"], transport[first]["transport"]) == ("fail", "Socket")
    assert (transport[second]["status"], transport[second]["transport"]) == ("pass", "IB")
    assert set(doc["events"]) == {first, second}
    assert all(e["problem"] or e["source"] for e in doc["events"].values())
    assert doc["straggler"]["outcome"] == "not judged" and doc["hang"]["outcome"] == "not judged"
    assert [(s["node"], s["sources"]) for s in doc["suspects"]] == [(first, ["transport"])]
    assert watched.returncode == 0, watched.stderr[-2000:]
    summaries = [line for line in watched.stdout.splitlines() if line.startswith(f"job {job} on slurm: ")]
    # a line each pass, then the last diagnosis in full; without --sku TCP sockets are not judged: no suspect
    assert len(summaries) >= 2 and all(line.endswith("suspects: none") for line in summaries)
    for gone in (job, "999999"):  # ended; never this cluster's
        out = run_gpuval("jobs", "diagnose", gone, "--on", "slurm", env=env, timeout=60)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        [line] = out.stderr.splitlines()
        assert line.startswith(f"error: could not diagnose Slurm job {gone}: ")


def _until(ready, what: str, timeout: float = 60, output: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            said = output.read_text()[-3000:] if output is not None and output.exists() else ""
            raise AssertionError(f"no {what} within {timeout:.0f} s{': ' if said else ''}{said}")
        time.sleep(0.3)


CLEAN_D4 = ("srun", "-w", "d4", "-N1", "-n1", "sh", "-c", 'rm -rf "$TMPDIR/gpuval-ranks-0"')


def _holds(path: Path, text: str, count: int = 1) -> bool:
    return path.exists() and path.read_text().count(text) >= count


def _sbatch(cluster, *argv: str, user: str = "") -> str:
    who = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={cluster.conf}"] if user else []
    sent = subprocess.run([*who, "sbatch", "--parsable", "--chdir=/tmp", *argv], capture_output=True, text=True,
                          env=cluster.cmd_env(), timeout=30)
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip().split(";")[0]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_what_a_user_plants_on_a_node_never_acts_with_the_operators_rights(cluster, env, tmp_path):
    """reliability-4 D1-D4 as the review ran them. User nobody, in a job of theirs on d4, makes root's hooks folder
    first (links at the names root's timed process will use, to two of root's files; a forged state file naming a
    root process outside any job, SIGKILL, no job, a start in the future). Root's own job on d4 then times ten steps
    (D3: root's files keep their bytes; the timer says it keeps no state), and root diagnoses that job (D1: the root
    process lives; the folder is passed over, said), once more from a folder holding a planted `gpuval/` (D2: never
    imported; the probe runs `-I` from /). Root diagnosing nobody's job is refused in one line (D4)."""
    shared = Path(tempfile.mkdtemp(prefix="gpuval-nobody-"))
    shared.chmod(0o777)  # nobody's script and output
    (shared / "plant.py").write_text(PLANT)
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    for name in ("a", "b"):
        (secret / name).write_text(f"root-only important data {name}")
    planted = tmp_path / "project"
    planted.mkdir()
    pwned = plant_gpuval(planted)
    (tmp_path / "timed.py").write_text(TIMED)
    pid_file, go, stepped = tmp_path / "pid", tmp_path / "go", tmp_path / "stepped"
    target = subprocess.Popen(["sleep", "300"])  # a root process outside any job (a daemon would do)
    mine = theirs = ""
    cluster.command(*CLEAN_D4, check=False)  # root's folder there, if an earlier test's ranks made it: none plant first
    try:
        mine = _sbatch(cluster, "-w", "d4", "-N1", "-n1", f"--output={tmp_path / 'out.txt'}", "--wrap",
                       f"srun {sys.executable} {tmp_path / 'timed.py'} {pid_file} {go} {stepped}")
        _until(pid_file.exists, "pid of root's timed process")
        theirs = _sbatch(cluster, "-w", "d4", "-N1", "-n1", f"--output={shared / 'out.txt'}", "--wrap",
                         f"srun /usr/bin/python3 {shared / 'plant.py'} {pid_file.read_text()} {target.pid} "
                         f"{secret / 'a'} {secret / 'b'} && exec sleep 300", user="nobody")
        _until(lambda: _holds(shared / "out.txt", "plant done\n"), "plant")
        go.touch()
        _until(stepped.exists, "ten timed steps")
        dry = run_gpuval("jobs", "diagnose", mine, "--on", "slurm", "--dry-run", env=env, timeout=60).stdout
        doc = _diagnose(env, mine, "--no-ras")
        from_planted = run_gpuval("jobs", "diagnose", mine, "--on", "slurm", "--no-ras", "--no-stacks", env=env,
                                  cwd=planted, timeout=120)
        refused = run_gpuval("jobs", "diagnose", theirs, "--on", "slurm", env=env, timeout=60)
        target_alive = target.poll() is None
    finally:
        cluster.command("scancel", *(j for j in (mine, theirs) if j), check=False)
        target.kill()
        target.wait()
        cluster.command(*CLEAN_D4, check=False)
        shutil.rmtree(shared, ignore_errors=True)
    observed = {
        "root's files": [(secret / name).read_bytes()[:40] for name in ("a", "b")],
        "the timer kept no state there": "gpuval.hooks: no rank state file in" in (tmp_path / "out.txt").read_text(),
        "root's process outside the job": "alive" if target_alive else f"ended ({target.returncode})",
        "the folder passed over": any("gpuval-ranks-0 passed over: not a folder of uid 0's own: owned by uid 65534"
                                      in note for note in doc.get("notes", [])),
        "planted gpuval ran": pwned.exists(),
        "the diagnosis from that folder": from_planted.returncode,
        "probe argv": ["--chdir=/" in dry, f"{sys.executable} -I -m gpuval jobs probe" in dry, "--uid 0" in dry],
    }
    assert observed == {
        "root's files": [b"root-only important data a", b"root-only important data b"],
        "the timer kept no state there": True, "root's process outside the job": "alive",
        "the folder passed over": True, "planted gpuval ran": False, "the diagnosis from that folder": 0,
        "probe argv": [True, True, True]}, (observed, doc.get("notes"), from_planted.stderr[-1000:])
    assert doc["hang"]["outcome"] == "not judged" and doc["probed"] == {"d4": ""}
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    [line] = refused.stderr.splitlines()
    assert line == (f"error: could not diagnose Slurm job {theirs}: Slurm refuses root a step in it (srun --overlap: "
                    "Access/permission denied); only the job's owner (nobody) can diagnose it: run `gpuval jobs "
                    "diagnose` as that user")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_foreign_jobs_labels_are_read_with_its_steps_own_layout(cluster, monkeypatch, tmp_path):
    """reliability-4 D5's job: `sbatch -N 2` (Slurm counts 2 tasks) running `srun --label --ntasks-per-node=2`,
    tasks 0-1 on the first node and 2-3 on the second. Each task prints the node it runs on; each labelled line is
    placed on that node (the step's layout, not the job's task count). The step's name holds ` Dist=Cyclic`: the
    distribution read is Slurm's own."""
    placed = _placed_lines(cluster, monkeypatch, tmp_path, "srun --label -J 'train Dist=Cyclic' --ntasks-per-node=2 "
                           "sh -c 'echo on $SLURMD_NODENAME; exec sleep 120'", 4)
    assert placed == [("d1", "d1"), ("d1", "d1"), ("d2", "d2"), ("d2", "d2")]


def _placed_lines(cluster, monkeypatch, tmp_path: Path, script: str, count: int) -> list[tuple[str | None, str]]:
    """A plain 2-node sbatch job on d1 and d2 running `script`, whose tasks each print `on NODE` (after a word or
    not): once `count` such lines are out, each one's node as the engine places it and the node it names."""
    out = tmp_path / "out.txt"
    job = _sbatch(cluster, "-N2", "-w", "d1,d2", "--exclusive", f"--output={out}", "--wrap", script)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        _until(lambda: _holds(out, "on d", count), f"{count} tasks' lines")
        placed = [(node, line.split()[-1]) for node, line in SlurmEngine().node_lines(job) if " on d" in f" {line}"]
    finally:
        cluster.command("scancel", job, check=False)
    return sorted(placed, key=repr)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lines_of_a_step_that_ended_are_not_read_with_the_running_steps_layout(cluster, monkeypatch, tmp_path):
    """Red team 5 N2: a one-task-per-node step 0 (as an NCCL pre-flight) ended, then step 1 runs two tasks per node.
    srun's label says which task printed a line, not which step: step 0's task 1, on the second node, was read with
    step 1's layout, on the first. Slurm without accounting (this cluster has no slurmdbd) no longer tells of step
    0, so no labelled line of the job is placed (a rank a probe finds is placed where it was found)."""
    placed = _placed_lines(cluster, monkeypatch, tmp_path, "srun --label --ntasks-per-node=1 sh -c 'echo before on "
                           "$SLURMD_NODENAME'; srun --label --ntasks-per-node=2 sh -c 'echo on $SLURMD_NODENAME; exec "
                           "sleep 120'", 6)
    assert placed == [(None, "d1")] * 3 + [(None, "d2")] * 3


HANG = Path(__file__).resolve().parents[2] / "helpers" / "flight_hang.py"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_flight_recorder_dump_names_the_rank_behind_in_its_process_group(cluster, env, tmp_path):
    """A 2-node job of two gloo ranks per node (tests/helpers/flight_hang.py under srun, `--gpuval`: the recorder
    at gpuval's stem in each rank's state folder and a step timer, as gpuval train runs a rank). Each rank joins the
    world group and a pair group (tp: ranks 0-1 on d1, 2-3 on d2); after three steps rank 1 stops in Python before
    its pair's 4th all_reduce, rank 0 waits in it, and ranks 2 and 3 go on to wait in the world group's 4th. The
    probe on each node asks each rank for its dump through its pipe; the diagnosis names rank 1 behind in its pair
    group (not the world group, where ranks 0 and 1 are both behind), on d1, resting on its state file, py-spy and
    the Flight Recorder; rank 0, which its count alone would name, waits for rank 1 and is not named."""
    from gpuval.node.dist_env import free_port

    out = tmp_path / "out"
    out.mkdir()
    ranks = (f"RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS exec {sys.executable} {HANG} "
             f"{out} stop --gpuval")
    job = _sbatch(cluster, "-N2", "--ntasks-per-node=2", "-w", "d1,d2", f"--output={tmp_path / 'job.txt'}", "--wrap",
                  f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()} OMP_NUM_THREADS=1; "
                  f"srun --ntasks-per-node=2 --mpi=none bash -c '{ranks}'")
    try:
        _until(lambda: all((out / f"hung-{r}").exists() for r in range(4)), "the hang", timeout=150,
               output=tmp_path / "job.txt")
        time.sleep(5)  # every rank in its call, idle past the stall
        doc = _diagnose(env, job, "--stall", "3", "--no-ras", "--node-timeout", "30", timeout=150)
    finally:
        cluster.command("scancel", job, check=False)
    flight = doc["flight"]
    assert flight is not None, (doc["notes"], (tmp_path / "job.txt").read_text()[-2000:])
    findings = {f["desc"]: f for f in flight["findings"]}
    tp, world = findings["tp"], findings["default_pg"]
    assert (flight["root_ranks"], tp["members"], tp["seq"], tp["entered"], tp["behind"], tp["root"]) == \
        ([1], [0, 1], 4, [0], [1], True), flight
    assert (tp["op"], tp["input_sizes"]) == ("gloo:all_reduce", [[64, 4]])
    sites = {s["rank"]: s for s in tp["sites"]}
    assert sites[0]["call_site"].startswith("tensor_parallel_reduce (flight_hang.py:")
    assert (world["behind"], world["root"]) == ([0, 1], False)
    assert doc["flight_sources"] == {"0": "d1: asked through its pipe", "1": "d1: asked through its pipe",
                                     "2": "d2: asked through its pipe", "3": "d2: asked through its pipe"}
    [waited] = doc["hang"]["waited_for"]
    assert (waited["rank"], waited["node"], waited["evidence"]) == \
        (1, "d1", ["state file", "py-spy", "flight recorder"]), doc["hang"]
    assert [(s["node"], s["sources"]) for s in doc["suspects"]] == [("d1", ["hang", "flight recorder"])]


def _decoy(job: str, output: Path, cluster_name: str, sent_at: datetime | None = None) -> None:
    """gpuval's record of job `job` as an earlier gpuval left it: a training job in a pyxis container whose output is
    a file of step records (its probe would run in that container; its output would be read for the live job's)."""
    from gpuval.engines import records
    from gpuval.engines.spec import JobSpec
    from gpuval.hooks.record import Stats, StepRecord

    step = StepRecord(rank=0, local_rank=0, world=2, host="old", pid=7, first=0, last=9, n=10, t0=1.0, t1=2.0,
                      step_s=Stats(1.0, 0.1, 0.1), compute_s=Stats(0.5, 0.05, 0.05), wait_s=Stats(0.5, 0.05, 0.05))
    output.write_text(f"decoy output\n{step.to_line()}")
    spec = JobSpec(name="old-train", command=["gpuval", "train"], image="nvcr.io/nvidia/pytorch:24.05-py3",
                   workload="train", nodes=2)
    record = records.JobRecord(engine="slurm", job_id=job, spec=spec, output=str(output), cluster=cluster_name)
    records.save(record.model_copy(update={"submitted_at": sent_at}) if sent_at else record)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_record_of_another_cluster_or_an_earlier_job_of_the_id_is_not_used(cluster, env, tmp_path, monkeypatch):
    """issue 39 item 4: gpuval's job records were keyed by the job id alone, so `jobs diagnose 2` on a plain job
    read a fleet check's old output. A plain job of this cluster (`sbatch --wrap`: a line, then sleep) has id N;
    gpuval's jobs folder holds a record of a job N sent to another cluster (this cluster's ClusterName is fresh per
    test run, tests/helpers/slurm.py). `jobs logs N` prints the live job's output and `jobs diagnose N` probes it
    on its node (not in the record's container) and reads its output (no step records), each saying in one line
    that the record is not used. A record naming this cluster but sent a day before the job that has the id now is
    not used either."""
    monkeypatch.setenv("GPUVAL_JOBS_DIR", env["GPUVAL_JOBS_DIR"])
    live = tmp_path / "live.txt"
    job = _sbatch(cluster, "-w", "d1", "-N1", "-n1", f"--output={live}", "--wrap", "echo live output; exec sleep 120")
    try:
        _until(lambda: _holds(live, "live output"), "the job's output")
        _decoy(job, tmp_path / "decoy.txt", "gv-another-cluster")
        logs = run_gpuval("jobs", "logs", job, "--on", "slurm", env=env, timeout=60)
        diagnosed = run_gpuval("jobs", "diagnose", job, "--on", "slurm", "--json", "--no-ras", "--no-stacks", env=env,
                               timeout=120)
        _decoy(job, tmp_path / "decoy.txt", cluster.cluster_name, datetime.now(timezone.utc) - timedelta(days=1))
        earlier = run_gpuval("jobs", "logs", job, "--on", "slurm", env=env, timeout=60)
    finally:
        cluster.command("scancel", job, check=False)
    not_used = f"note: gpuval's record of slurm job {job} is not used: "
    assert (logs.returncode, logs.stdout) == (0, "live output\n"), logs.stderr
    assert logs.stderr == f"{not_used}it was sent to cluster 'gv-another-cluster', not this one " \
                          f"('{cluster.cluster_name}')\n"
    assert diagnosed.returncode == 0, diagnosed.stderr
    doc = json.loads(diagnosed.stdout)
    assert doc["probed"] == {"d1": ""} and doc["world"] == 0 and doc["straggler"]["outcome"] == "not judged"
    assert diagnosed.stderr.startswith(not_used)
    assert (earlier.returncode, earlier.stdout) == (0, "live output\n"), earlier.stderr
    assert earlier.stderr.startswith(not_used + "it was sent at ") and "an earlier job of the same id" in earlier.stderr
