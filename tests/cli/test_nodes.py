"""`gpuval nodes`: what gpuval holds out of service, read from the scheduler itself: on the session's real Slurm
(nodes n1, n2), and on Kubernetes against kmock (an in-memory Kubernetes API: no API server runs here)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes import client

from gpuval.engines.nodes import ACTIONS_ANNOTATION, FAULTS_ANNOTATION, TAINT_KEY, TIME_ANNOTATION
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Conviction, write_bundle
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.kube import kubeconfig_for

RUN = "20261127T120000Z-0ecc00"


@pytest.fixture
def cluster(slurm, monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    return slurm


def test_slurm_lists_gpuvals_drains_only_with_what_lifts_each(cluster, tmp_path: Path):
    cluster.scontrol("update", "nodename=n1", "state=drain",
                     f"reason=gpuval: ECC_ERRORS GEMM_SLOW {RUN}; action reboot")
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=gpuval: RMA-ticket-4711-do-not-resume")
    try:
        proc = run_gpuval("nodes", "--on", "slurm", "--json")
        assert proc.returncode == 0, proc.stderr
        [held] = json.loads(proc.stdout)  # n2's reason is a person's: not gpuval's to list
        assert (held["node"], held["codes"], held["actions"], held["run_id"]) == \
            ("n1", ["ECC_ERRORS", "GEMM_SLOW"], ["reboot"], RUN)
        assert held["since"] and held["evidence"].endswith(f"evidence/n1/{RUN}.yaml on n1")
        assert "full gpuval health --drain" in held["lifts"] and "GEMM_SLOW" in held["lifts"]
        shown = run_gpuval("nodes", "--on", "slurm")
        assert shown.returncode == 0 and "n1" in shown.stdout and "RMA" not in shown.stdout, shown.stdout
    finally:
        for node in ("n1", "n2"):
            cluster.scontrol("update", f"nodename={node}", "state=resume")
    assert "no node held" in run_gpuval("nodes", "--on", "slurm").stdout


def test_a_bad_scheduler_is_one_line_exit_2():
    proc = run_gpuval("nodes", "--on", "pbs")
    assert proc.returncode == 2 and "unknown scheduler" in proc.stderr and "Traceback" not in proc.stderr


def test_the_context_is_the_kubernetes_engines_own_option(tmp_path: Path):
    """`--context` reaches the client the Kubernetes engine hands out (its option `context`), no client the command
    builds itself: a context the kubeconfig lacks is one line, exit 2, and so is the option on Slurm, which has
    none."""
    kubeconfig = kubeconfig_for(SimpleNamespace(url="http://127.0.0.1:9"), tmp_path / "kubeconfig")  # never reached
    proc = run_gpuval("nodes", "--on", "kubernetes", "--context", "nosuch", env={"KUBECONFIG": str(kubeconfig)})
    assert proc.returncode == 2 and "Expected object with name nosuch" in proc.stderr, proc.stderr
    proc = run_gpuval("nodes", "--on", "slurm", "--context", "kmock")
    assert proc.returncode == 2 and "slurm option context" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.asyncio
async def test_kubernetes_lists_gpuvals_taints_and_a_fleet_retest_lifts_only_one_with_its_bundle_here(kmock,
                                                                                                     tmp_path: Path):
    """g1 and g3 tainted by fleet checks; only g1's bundle is here (g3's was never written, or is on another host).
    Before (red team 5, N5), g3 too was pointed at its folder and said to be lifted by `gpuval fleet retest`, which
    then refused it ("no evidence bundle ... a person lifts it")."""
    kmock.resources["v1/nodes"] = {"kind": "Node", "namespaced": False}
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    taint = [{"key": TAINT_KEY, "effect": "NoSchedule"}]
    notes = {FAULTS_ANNOTATION: "FLEET_SLOW", ACTIONS_ANNOTATION: "", TIME_ANNOTATION: "2026-11-27T12:00:00+00:00"}
    for name, taints, marks in (("g1", taint, notes), ("g2", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                                                             {}), ("g3", taint, notes)):
        await asyncio.to_thread(client.CoreV1Api(api).create_node, {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": marks},
            "spec": {"taints": taints}})
    state = tmp_path / "state"
    action = NodeAction("kubernetes", "g1", Status.FAIL, Acted.TAINTED, "fleet")
    bundle = write_bundle(state, None, "fleet check", Conviction(RUN, [], [], action, {"settings": {"iters": 5}}))
    proc = await asyncio.to_thread(run_gpuval, "nodes", "--on", "kubernetes", "--json", env={
        "KUBECONFIG": str(kubeconfig_for(kmock, tmp_path / "kubeconfig")), "GPUVAL_STATE_DIR": str(state)})
    assert proc.returncode == 0, proc.stderr
    held = {h["node"]: h for h in json.loads(proc.stdout)}
    assert sorted(held) == ["g1", "g3"]
    assert held["g3"]["evidence"].startswith(f"none here (no bundle in {state / 'evidence' / 'g3'} keeps"), held
    assert held["g3"]["lifts"].startswith("a person"), held["g3"]
    assert (held["g1"]["codes"], held["g1"]["since"]) == (["FLEET_SLOW"], "2026-11-27T12:00:00+00:00")
    assert held["g1"]["evidence"] == f"{bundle} where the fleet check ran"  # no run id in a taint: its newest
    assert "gpuval fleet retest --nodelist NODE" in held["g1"]["lifts"]
