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
async def test_kubernetes_lists_gpuvals_taints(kmock, tmp_path: Path):
    kmock.resources["v1/nodes"] = {"kind": "Node", "namespaced": False}
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    for name, taints, notes in (
            ("g1", [{"key": TAINT_KEY, "effect": "NoSchedule"}],
             {FAULTS_ANNOTATION: "FLEET_SLOW", ACTIONS_ANNOTATION: "", TIME_ANNOTATION: "2026-11-27T12:00:00+00:00"}),
            ("g2", [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}], {})):
        await asyncio.to_thread(client.CoreV1Api(api).create_node, {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": notes},
            "spec": {"taints": taints}})
    proc = await asyncio.to_thread(run_gpuval, "nodes", "--on", "kubernetes", "--json",
                                   env={"KUBECONFIG": str(kubeconfig_for(kmock, tmp_path / "kubeconfig"))})
    assert proc.returncode == 0, proc.stderr
    [held] = json.loads(proc.stdout)
    assert (held["node"], held["codes"], held["since"]) == ("g1", ["FLEET_SLOW"], "2026-11-27T12:00:00+00:00")
    assert "gpuval fleet retest --nodelist NODE" in held["lifts"]
    assert held["evidence"].endswith("evidence/g1 where the fleet check ran")  # no run id in a taint
