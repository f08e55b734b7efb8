"""The drain brake on Kubernetes: real `gpuval health --drain --scheduler kubernetes` processes at once (the DaemonSet's
pods, each on its node) against kmock, an in-memory Kubernetes API emulator on 127.0.0.1 (no API server can run
here), reading a kubeconfig that points at it. Each pod counts the nodes under gpuval's taint in one list call
before it taints its node and again after. kmock answers every call in turn, as one API server backed by etcd."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes import client

from gpuval.engines.nodes import FAULTS_ANNOTATION, HEALTH_LABEL, TAINT_KEY
from tests.conftest import run_gpuval
from tests.helpers.kube import kubeconfig_for
from tests.operate.support import recorded_machine

NODES = [f"gpu-{i}" for i in range(1, 7)]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _cluster(server) -> None:
    server.resources["v1/nodes"] = {"kind": "Node", "namespaced": False}
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=str(server.url).rstrip("/"))))
    for name in NODES:
        core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "1"},
                          "spec": {"taints": [GPU_TAINT]}})


def _tainted(server) -> list[str]:
    return [n for n in NODES if any(t.get("key") == TAINT_KEY for t in server.objects["v1/nodes", None, n].raw
                                    ["spec"].get("taints") or [])]


@pytest.mark.asyncio
async def test_six_pods_failing_at_once_taint_at_most_the_cap(kmock, tmp_path, monkeypatch):
    """Six nodes, the default cap (5%, at least 2): every pod judges a recording with ECC errors and exits 1; at
    most two nodes are tainted, each node left untainted is labelled fail with no fault codes (they stand for a
    taint) and its run has the `drain_brake` record."""
    await asyncio.to_thread(_cluster, kmock)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(kmock, tmp_path / "kubeconfig")))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    bad = recorded_machine(tmp_path, "bad", ecc_errors=4)

    def pod(node: str):
        return run_gpuval("health", "--recorded", str(bad), "--drain", "--scheduler", "kubernetes", "--json",
                          env={"GPUVAL_NODE_NAME": node}, timeout=280)

    done = dict(zip(NODES, await asyncio.gather(*(asyncio.to_thread(pod, n) for n in NODES))))
    tainted = _tainted(kmock)
    assert 1 <= len(tainted) <= 2, tainted
    for node, proc in done.items():
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        out = json.loads(proc.stdout)
        stored = kmock.objects["v1/nodes", None, node].raw["metadata"]
        assert stored["labels"][HEALTH_LABEL] == "fail"
        if node in tainted:
            assert out["node_action"]["action"] == "tainted" and stored["annotations"][FAULTS_ANNOTATION] == "ECC_ERRORS"
            continue
        assert out["node_action"]["action"] in ("not tainted", "not drained"), out["node_action"]
        assert "the drain brake" in out["node_action"]["detail"]
        assert FAULTS_ANNOTATION not in stored.get("annotations", {})
        assert [r["status"] for r in out["results"] if r["name"] == "drain_brake"] == ["error"]
        assert kmock.objects["v1/nodes", None, node].raw["spec"]["taints"] == [GPU_TAINT]  # others' taints kept
