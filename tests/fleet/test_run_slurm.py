"""`gpuval fleet check --on slurm --wait --json --drain` against six nodes of the session's real Slurm cluster on
this host (its fleet partition, tests/helpers/slurm_session.py), with one broken node and one slow node, each by
its own honest means (tests/helpers/slurm_fabric.py says how):

- f3 is broken: its tasks are pointed (TaskProlog, f3 only) at a network interface that does not exist, so every
  rank it starts for a multi-node collective fails to create its gloo device, as a node whose IB port is gone. Its
  in-node test binds loopback and passes.
- f5 is slow: its slurmd runs in a network namespace of its own whose only link to the other nodes is a veth pair
  shaped to 200 Mbit/s each way (tc tbf), a NIC trained far below its rate. Its in-node test runs on its own
  loopback, full speed.
- f1, f2, f4, f6 are healthy.

Nothing in gpuval knows any of this: the figures are real gloo busbw between real processes (all_reduce and
sendrecv, 1 MiB, per-cycle samples), the crashes real crashes. The check must name exactly f3 and f5, clear every
node they were paired with, say which rounds it took, drain the two (reason "gpuval: ..."), and store every
measurement with its node, all with the check's defaults: this 2-core machine is shared and its timings swing by
tens of percent, so the check widens its cut to that spread (at most 50%); f5's link carries a tenth to a
twentieth of what loopback does, so even that cut convicts it, and the check runs beside other tests (no longer
`alone`).

Also here: a check whose jobs their partition can never take, and the nodes Slurm offers (--nodes N: sinfo's idle
nodes) and its switches (`scontrol show topology` with TopologyPlugin=topology/tree), read from a real slurmctld.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import run_gpuval
from tests.helpers.slurm import SlurmCluster
from tests.helpers.slurm_session import FLEET_BROKEN as BROKEN
from tests.helpers.slurm_session import FLEET_SLOW as SLOW




def _partners(node: dict) -> set[str]:
    return {m for e in node["evidence"] if e["kind"] == "pair" for m in e["nodes"]} - {node["host"]}


@pytest.mark.slow
@pytest.mark.timeout(900)  # four to six rounds of real jobs
def test_with_its_defaults_the_check_names_the_broken_and_the_slow_node_and_clears_their_partners(fabric,
                                                                                                  tmp_path: Path):
    """No measurement option: only the nodes, their partition and what to do with the verdicts (--wait --json
    --drain; --poll 1 asks Slurm every second, not every 10, whether a round's jobs ended). On CPU ranks the sizes
    and samples follow the devices (1 MiB, 8/4/8 samples, more where the noise asks), and the 3% cut widens to this
    shared machine's spread (and says so); f3's crashes convict it whatever the noise, and f5's link is so far
    under loopback's rate that even the widest cut (50%) convicts it. Within nine minutes beside the rest of the
    suite (293 and 377 s beside other Slurm tests)."""
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    started = time.monotonic()
    proc = run_gpuval("fleet", "check", "--on", "slurm", "--opt", "partition=fleet", "--nodelist", "f[1-6]",
                      "--wait", "--json", "--drain", "--poll", "1", env=env, timeout=840)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    nodes = {n["host"]: n for n in out["nodes"]}
    status = {host: n["status"] for host, n in nodes.items()}
    assert status == {"f1": "pass", "f2": "pass", "f3": "fail", "f4": "pass", "f5": "fail", "f6": "pass"}, \
        {h: n["reason"] for h, n in nodes.items()}
    assert out["failed"] == [BROKEN, SLOW] and out["exclude"] == "f[3,5]"
    assert [n["host"] for n in out["nodes"]][:2] == [BROKEN, SLOW]  # bad nodes first

    broken, slow = nodes[BROKEN], nodes[SLOW]
    assert broken["reason"].startswith("broken") and broken["fault_codes"] == ["FLEET_BROKEN"]
    assert any("gvnonic0" in (e["reason"] or "") for e in broken["evidence"])  # its own rank says why
    assert slow["reason"].startswith("slow") and slow["fault_codes"] == ["FLEET_SLOW"]
    for bad in (broken, slow):
        # Their in-node test did not fail (pass, or warn when this shared machine's noise left it unsure): only
        # their network is at fault, and only pairs could say so.
        assert [e["status"] for e in bad["evidence"] if e["kind"] == "node"] in (["pass"], ["warn"])
        partners = _partners(bad)
        assert len(partners) >= 2 and all(status[p] == "pass" for p in partners), (bad["host"], partners)

    log = out["round_log"]
    assert out["rounds"] == len(log) >= 4
    assert log[0]["tests"] == {"suite": 6} and log[0]["jobs"] == 1  # every node at once, one job
    assert "screen" in log[1]["tests"] and log[1]["jobs"] == 3  # disjoint pairs, one job each, side by side
    assert "scale" in log[-1]["tests"]  # the full scale of the nodes that passed ends it
    [scale] = out["groups"]
    assert sorted(scale["hosts"]) == ["f1", "f2", "f4", "f6"]
    assert took < 540, (took, log)

    drained = {a["node"]: a for a in out["actions"]}
    assert set(drained) == {BROKEN, SLOW} and all(a["action"] == "drained" for a in drained.values())
    broken = fabric.node(BROKEN)
    assert broken.drained and broken.reason.startswith(f"gpuval: FLEET_BROKEN {out['run_id']}"), broken

    import os

    stored = open_store(os.environ["GPUVAL_DB"]).results(Query(run_ids=[out["run_id"]]))
    verdicts = {r.where.hostname: r.status.value for r in stored if r.kind == "fleet" and r.name == "node"}
    assert verdicts == status
    health = {r.where.hostname for r in stored if r.kind == "health"}
    assert health == set(status)  # each node's suite, stored under the node's name (all six share one host)
    tests = [r for r in stored if r.kind == "fleet" and r.name == "test" and r.params["purpose"] == "screen"]
    assert {r.where.hostname for r in tests} == set(status)  # every screen measured, stored with both nodes
    assert all(r.where.engine == "slurm" and r.where.job_id for r in tests)

    md = tmp_path / "report.md"
    report = run_gpuval("report", "--run", out["run_id"], "-o", str(tmp_path / "report.html"), "--md", str(md))
    assert report.returncode == 1, report.stderr  # the run has failing nodes
    text = md.read_text()
    assert "### Fleet check" in text and "Failing: **f3, f5**" in text


# A hostile node, as the red team made one: a sitecustomize on the jobs' PYTHONPATH that acts in `gpuval fleet
# node-test` only. On HOSTILE the in-node all_reduce finds wrong data (the very fault the check looks for) and the
# task exits 2 with its error line; on every other node the test waits a few seconds before its real all_reduce,
# so it is still running when the hostile task fails.
HOSTILE = "f2"
_HOOK = f"""
import os, sys, time
if "node-test" in sys.argv and os.environ.get("SLURMD_NODENAME"):
    import gpuval.fleet.run.node_worker as worker
    from gpuval.errors import EngineError
    real = worker._in_node

    def _in_node(*args, **kwargs):
        if os.environ["SLURMD_NODENAME"] == {HOSTILE!r}:
            time.sleep(1)
            raise EngineError("in-node all_reduce over 2 ranks: 1024 wrong elements")
        time.sleep(12)
        return real(*args, **kwargs)

    worker._in_node = _in_node
"""


@pytest.mark.slow
@pytest.mark.timeout(300)  # 34 to 36 s in the suite
def test_one_node_whose_node_test_fails_drains_only_itself(slurm, tmp_path: Path):
    """Node tests are independent: the node test of one node that exits 2 must not end the others' (every job ran
    with `srun --kill-on-bad-exit`: the others' killed tests counted as crashes, the re-run was killed the same
    way, and all three nodes were drained FLEET_NODE_CRASH). Only the hostile node is drained, and a results file
    that cannot be written (/dev/full: the check ended at its first write, nothing drained) stops neither the check
    nor the drain."""
    hook = tmp_path / "hostile"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_HOOK)
    nodes = ["f1", HOSTILE, "f4"]  # healthy on the fabric too (its faults are f3 and f5)
    env = {**slurm.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    proc = run_gpuval("fleet", "check", "--on", "slurm", "--opt", "partition=fleet", "--nodelist", ",".join(nodes),
                      "--wait", "--json", "--drain", "--samples", "2,2,2", "--size", "64K", "--iters", "2",
                      "--warmup", "0", "--cut", "0.5", "--timeout", "120", "--poll", "1",
                      "--env", f"PYTHONPATH={hook}", "--results", "/dev/full", env=env, timeout=280)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    nodes_out = {n["host"]: n for n in out["nodes"]}
    assert out["failed"] == [HOSTILE], {h: n["reason"] for h, n in nodes_out.items()}
    assert "1024 wrong elements" in nodes_out[HOSTILE]["reason"]
    assert [(a["node"], a["action"]) for a in out["actions"]] == [(HOSTILE, "drained")]
    assert any(n.endswith("not stored (/dev/full: No space left on device)") for n in out["notes"]), out["notes"]
    drained = slurm.drained("fleet")
    assert set(drained) == {HOSTILE}, drained
    node_job = next((tmp_path / "jobs" / "slurm").glob("gpuval-fleet-r0-nodes*/job.sbatch")).read_text()
    assert "--kill-on-bad-exit" not in node_job  # each node test runs to its own end


class _TopologyCluster(SlurmCluster):
    """Four nodes under two leaf switches (topology/tree), as a site's topology.conf says."""

    def extra_conf(self) -> list[str]:
        (self.root / "topology.conf").write_text("SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-4]\n"
                                                 "SwitchName=spine Switches=leaf[1-2]\n")
        return ["TopologyPlugin=topology/tree"]


@pytest.mark.slow
def test_nodes_and_switches_come_from_slurm(monkeypatch):
    """--nodes 3 takes sinfo's first three idle nodes; the switches are scontrol's leaves (and no NVL72 rack: a tree
    has no blocks); the dry run of round 0 pins its one job to them."""
    from gpuval.engines.slurm import SlurmEngine

    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-topo-"))
    try:
        with _TopologyCluster(root, nodes=4) as cluster:
            monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
            site = SlurmEngine().site()
            assert site.pick(3) == ["n1", "n2", "n3"]
            assert site.groups(["n1", "n2", "n3", "n4"]) == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2",
                                                             "n4": "leaf2"}
            assert site.unavailable(["n1", "n4", "n9"]) == {"n9": "not known to Slurm"}
            assert site.racks(["n1", "n2", "n3", "n4"]) == {}  # no topology/block (23.11+): racks from the domains
            proc = run_gpuval("fleet", "check", "--on", "slurm", "--nodes", "3", "--dry-run", env=cluster.env)
            assert proc.returncode == 0, proc.stderr
            # shlex-quoted, as every directive: sbatch reads #SBATCH lines with shell quoting
            assert "#SBATCH '--nodelist=n[1-3]'" in proc.stdout and "#SBATCH --exclusive" in proc.stdout
            # the pair is one test (one fate); the node tests of round 0 are each their own
            node_job, pair_job = proc.stdout.split("round 1 (if round 0 passes)")
            assert "--kill-on-bad-exit" not in node_job
            assert "srun --kill-on-bad-exit=1" in pair_job and "#SBATCH '--nodelist=n[1-2]'" in pair_job
            too_many = run_gpuval("fleet", "check", "--on", "slurm", "--nodes", "9", "--dry-run", env=cluster.env)
            assert too_many.returncode == 2 and "Slurm has 4 idle nodes" in too_many.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(120)  # 15 s alone
def test_a_check_whose_jobs_its_partition_can_never_take_ends_in_seconds_judging_nobody(slurm, tmp_path: Path):
    """The check's jobs sent to a partition that allows one node a job (`narrow`, made for this test with `scontrol
    create`, on three of the fleet's nodes): Slurm queues each multi-node job for PartitionNodeLimit for ever. The
    check gives each up on its third look (seconds, not the hour of --queue-timeout), cancels it, and ends with its
    tests "could not run": no node judged, none drained, the reason Slurm gave said, no job of it left queued."""
    nodes = ["f1", "f2", "f4"]
    slurm.scontrol("create", "PartitionName=narrow", f"Nodes={','.join(nodes)}", "MaxNodes=1", "State=UP")
    try:
        started = time.monotonic()
        proc = run_gpuval("fleet", "check", "--on", "slurm", "--opt", "partition=narrow", "--nodelist",
                          ",".join(nodes), "--wait", "--json", "--drain", "--queue-timeout", "3600", "--poll", "1",
                          env={**slurm.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}, timeout=240)
        took = time.monotonic() - started
        assert proc.returncode == 2, proc.stderr[-3000:]  # could not run: nothing was measured
        out = json.loads(proc.stdout)
        assert took < 120 and out["status"] == "error", (took, out["round_log"])
        for node in out["nodes"]:
            assert (node["status"], node["cause"], node["fault_codes"]) == ("error", "could not run", [])
            assert "could not start: PartitionNodeLimit" in node["reason"], node["reason"]
        assert out["failed"] == [] and out["actions"] == []
        queued = subprocess.run(["squeue", "-h", "-p", "narrow", "-o", "%i %T"], capture_output=True, text=True,
                                env=slurm.cmd_env(), timeout=30).stdout
        assert queued.strip() == ""  # each job given up was cancelled
    finally:
        slurm.scontrol("delete", "PartitionName=narrow")
