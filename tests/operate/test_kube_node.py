"""Kubernetes node labels and taints through the official client against kmock, an in-memory Kubernetes API
emulator on 127.0.0.1 (no API server can run here). kmock applies a PATCH as a JSON merge (what gpuval sends:
application/merge-patch+json); it keeps no resourceVersion of its own, so the test sets one on the node and checks
that gpuval sends back the one it read (what makes a real API server refuse a stale taint list with 409)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import kmock
import pytest
from kubernetes import client

from gpuval.operate.codes import Acted
from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.errors import EngineError
from gpuval.engines.nodes import ACTIONS_ANNOTATION, FAULTS_ANNOTATION, HEALTH_LABEL, RUN_LABEL, TAINT_KEY, label_value
from gpuval.operate.node_state import apply, plan_taints
from gpuval.workloads.health.last_full import path_for
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.kube import kubeconfig_for
from tests.operate.support import recorded_machine

NODES = "v1/nodes"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
ADMIN_TAINT = {"key": "maintenance", "value": "rack-4", "effect": "NoExecute"}


def _api(server: kmock.RawHandler) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=str(server.url).rstrip("/")))


def _on(api: client.ApiClient):
    """The Kubernetes node client through `api` (the one the engine hands out: KubernetesEngine.node_client)."""
    return KubernetesEngine(api_client=api).node_client()


def _node(server: kmock.RawHandler, name: str = "gpu-node-1", taints: list | None = None) -> client.ApiClient:
    server.resources[NODES] = {"kind": "Node", "namespaced": False}
    api = _api(server)
    client.CoreV1Api(api).create_node({"apiVersion": "v1", "kind": "Node",
                                       "metadata": {"name": name, "resourceVersion": "41",
                                                    "labels": {"kubernetes.io/hostname": name}},
                                       "spec": {"taints": taints if taints is not None else [GPU_TAINT]}})
    return api


def _stored(server: kmock.RawHandler, name: str = "gpu-node-1") -> dict:
    return server.objects[NODES, None, name].raw


def _patches(server: kmock.RawHandler) -> list:
    return [r for r in server if r.method == "PATCH"]


@pytest.mark.asyncio
async def test_fail_taints_and_labels_keeping_every_other_taint(kmock):
    api = await asyncio.to_thread(_node, kmock, taints=[GPU_TAINT, ADMIN_TAINT])
    action = await asyncio.to_thread(apply, Status.FAIL, "gpu-node-1", "20260101T000000Z-abc123",
                                     ["ECC_ERRORS", "XID_ERROR"], _on(api))
    assert (action.scheduler, action.action) == ("kubernetes", Acted.TAINTED)
    node = _stored(kmock)
    assert node["spec"]["taints"] == [GPU_TAINT, ADMIN_TAINT, {"key": TAINT_KEY, "effect": "NoSchedule"}]
    assert node["metadata"]["labels"][HEALTH_LABEL] == "fail"
    assert node["metadata"]["labels"][RUN_LABEL] == "20260101T000000Z-abc123"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-1"  # others' labels untouched
    assert node["metadata"]["annotations"][FAULTS_ANNOTATION] == "ECC_ERRORS XID_ERROR"
    [patch] = _patches(kmock)
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.data["metadata"]["resourceVersion"] == "41"  # a stale list is refused by a real API server

    # A second failure adds no second taint (and sends no taint list at all).
    again = await asyncio.to_thread(apply, Status.FAIL, "gpu-node-1", "20260101T000000Z-abc124", ["ECC_ERRORS"],
                                    _on(api))
    assert again.action == Acted.UNCHANGED and len(_stored(kmock)["spec"]["taints"]) == 3
    assert "spec" not in _patches(kmock)[-1].data


@pytest.mark.asyncio
async def test_error_labels_but_leaves_taints_and_a_pass_removes_only_gpuvals_taint(kmock):
    api = await asyncio.to_thread(_node, kmock, taints=[GPU_TAINT, {"key": TAINT_KEY, "effect": "NoSchedule"},
                                                        ADMIN_TAINT])
    error = await asyncio.to_thread(apply, Status.ERROR, "gpu-node-1", "20260101T000000Z-e44044", [], _on(api))
    node = _stored(kmock)
    assert error.action == Acted.UNCHANGED and "nothing judged" in error.detail
    assert node["metadata"]["labels"][HEALTH_LABEL] == "error" and len(node["spec"]["taints"]) == 3

    passed = await asyncio.to_thread(apply, Status.WARN, "gpu-node-1", "20260101T000000Z-9a5500", [], _on(api))
    node = _stored(kmock)
    assert passed.action == Acted.UNTAINTED
    assert node["spec"]["taints"] == [GPU_TAINT, ADMIN_TAINT]
    assert node["metadata"]["labels"][HEALTH_LABEL] == "warn" and node["metadata"]["labels"][RUN_LABEL] == "20260101T000000Z-9a5500"
    assert FAULTS_ANNOTATION not in node["metadata"].get("annotations", {})


@pytest.mark.asyncio
async def test_a_taint_someone_else_set_on_the_same_key_with_another_effect_stays(kmock):
    """Only gpuval's own taint (its key with NoSchedule) goes; a NoExecute on that key is someone's decision."""
    theirs = {"key": TAINT_KEY, "effect": "NoExecute"}
    api = await asyncio.to_thread(_node, kmock, taints=[theirs])
    action = await asyncio.to_thread(apply, Status.PASS, "gpu-node-1", "20260101T000000Z-abc125", [], _on(api))
    assert action.action == Acted.UNCHANGED and _stored(kmock)["spec"]["taints"] == [theirs]


@pytest.mark.asyncio
async def test_a_conflict_reads_the_node_again(kmock):
    """The first PATCH meets a node another controller changed meanwhile (a new taint, a new resourceVersion):
    the API server answers 409, gpuval reads the node again and keeps the other controller's taint."""
    api = await asyncio.to_thread(_node, kmock)
    other = {"key": "nvsentinel/quarantine", "effect": "NoSchedule"}

    def concurrent_write(_request):
        # kmock applied gpuval's patch already: put the object as the other controller left it, then refuse.
        kmock.objects[NODES, None, "gpu-node-1"] = {
            **_stored(kmock), "metadata": {**_stored(kmock)["metadata"], "resourceVersion": "42", "labels": {}},
            "spec": {"taints": [GPU_TAINT, other]}}
        return {"kind": "Status", "status": "Failure", "reason": "Conflict", "code": 409}

    kmock["patch", "/api/v1/nodes/gpu-node-1"][:1] << 409 << concurrent_write
    action = await asyncio.to_thread(apply, Status.FAIL, "gpu-node-1", "20260101T000000Z-abc125", ["GPU_MISSING"], _on(api))
    assert action.action == Acted.TAINTED
    first, second = _patches(kmock)
    assert first.data["metadata"]["resourceVersion"] == "41" and second.data["metadata"]["resourceVersion"] == "42"
    assert _stored(kmock)["spec"]["taints"] == [GPU_TAINT, other, {"key": TAINT_KEY, "effect": "NoSchedule"}]


@pytest.mark.asyncio
async def test_a_missing_node_is_a_one_line_error(kmock):
    await asyncio.to_thread(_node, kmock)
    with pytest.raises(EngineError, match="kubernetes get node nope: 404"):
        await asyncio.to_thread(apply, Status.FAIL, "nope", "20260101T000000Z-abc126", [], _on(_api(kmock)))


def test_label_values_are_valid_whatever_the_run_id():
    assert label_value("20260101T000000Z-abc123") == "20260101T000000Z-abc123"
    assert label_value("-run:id with spaces\n" + "x" * 80) == "run-id-with-spaces-" + "x" * 44
    assert plan_taints(Status.SKIPPED, [GPU_TAINT]) == (None, Acted.UNCHANGED)


@pytest.mark.asyncio
async def test_health_drain_on_kubernetes_through_the_command_line(kmock, tmp_path, monkeypatch):
    """`gpuval health --drain --scheduler kubernetes` as the DaemonSet and CronJob run it (a subprocess reading a
    kubeconfig that points at kmock): a failing machine taints its node; a quick check after a full FAIL keeps the
    taint (fresh: still failing; stale: reported, not judged, the taint held); a full pass removes gpuval's taint
    only."""
    await asyncio.to_thread(_node, kmock, taints=[GPU_TAINT])
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(kmock, tmp_path / "kubeconfig")))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    ours = {"key": TAINT_KEY, "effect": "NoSchedule"}

    async def health(machine, *args: str) -> tuple[int, dict]:
        proc = await asyncio.to_thread(run_gpuval, "health", "--recorded", str(machine), "--drain", "--scheduler",
                                       "kubernetes", "--node", "gpu-node-1", "--json", *args)
        assert "Traceback" not in proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    slow, good = recorded_machine(tmp_path, "slow", h2d_gbps=10), recorded_machine(tmp_path, "good")
    code, full = await health(slow)
    assert code == 1 and full["node_action"]["action"] == "tainted"
    node = _stored(kmock)
    assert node["spec"]["taints"] == [GPU_TAINT, ours] and node["metadata"]["labels"][HEALTH_LABEL] == "fail"
    assert node["metadata"]["annotations"][FAULTS_ANNOTATION] == "H2D_D2H_SLOW"

    code, quick = await health(slow, "--quick")
    assert code == 1 and quick["node_action"]["verdict"] == "fail"
    assert _stored(kmock)["spec"]["taints"] == [GPU_TAINT, ours]

    kept = path_for("gpu-node-1")
    stale = json.loads(kept.read_text())
    stale["finished_at"] = (datetime.now(timezone.utc) - timedelta(days=30)).isoformat()
    kept.write_text(json.dumps(stale))
    code, quick = await health(slow, "--quick")
    assert code == 0 and (quick["node_action"]["verdict"], quick["node_action"]["action"]) == ("pass", "unchanged")
    assert "gpuval's taint gpuval.io/unhealthy kept" in quick["node_action"]["detail"]
    node = _stored(kmock)
    assert node["spec"]["taints"] == [GPU_TAINT, ours] and node["metadata"]["labels"][HEALTH_LABEL] == "pass"
    assert node["metadata"]["annotations"][FAULTS_ANNOTATION] == "H2D_D2H_SLOW"  # kept with the taint it explains

    code, full = await health(good)
    assert code == 0 and full["node_action"]["action"] == "untainted"
    node = _stored(kmock)
    assert node["spec"]["taints"] == [GPU_TAINT] and FAULTS_ANNOTATION not in node["metadata"]["annotations"]


def test_a_hold_keeps_gpuvals_taint_on_a_pass():
    ours = {"key": TAINT_KEY, "effect": "NoSchedule"}
    assert plan_taints(Status.PASS, [GPU_TAINT, ours], hold="the last full check failed") == (None, Acted.UNCHANGED)
    assert plan_taints(Status.FAIL, [GPU_TAINT], hold="x") == ([GPU_TAINT, ours], Acted.TAINTED)


@pytest.mark.asyncio
async def test_health_drain_in_a_pod_acts_on_its_node_not_the_pods_host_name(kmock, tmp_path, monkeypatch):
    """A gpuval pod without --node (a job's pod, the DaemonSet's): the node is the one the scheduler put the pod
    on, from GPUVAL_NODE_NAME (the downward API gives it to every gpuval pod), never the pod's own host name,
    which names no node (it acted on the host name: `get node <pod name>: 404`, nothing tainted)."""
    await asyncio.to_thread(_node, kmock, taints=[])
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(kmock, tmp_path / "kubeconfig")))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    slow = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    proc = await asyncio.to_thread(run_gpuval, "health", "--recorded", str(slow), "--drain", "--scheduler",
                                   "kubernetes", "--json", env={"GPUVAL_NODE_NAME": "gpu-node-1",
                                                                "HOSTNAME": "gpuval-health-x2k9q"})
    assert proc.returncode == 1, proc.stderr
    action = json.loads(proc.stdout)["node_action"]
    assert (action["node"], action["action"]) == ("gpu-node-1", "tainted")
    assert _stored(kmock)["spec"]["taints"] == [{"key": TAINT_KEY, "effect": "NoSchedule"}]


@pytest.mark.asyncio
async def test_the_suggested_action_is_annotated_as_the_slurm_reason_names_it(kmock):
    """A failed Xid 79 suggests a reboot: Slurm's reason ends "; action reboot", the Kubernetes node carries it in
    gpuval.io/health-actions while gpuval's taint is on; a pass that lifts the taint removes it."""
    api = await asyncio.to_thread(_node, kmock)
    run = "20260101T000000Z-a7c710"
    done = await asyncio.to_thread(apply, Status.FAIL, "gpu-node-1", run, ["XID_ERROR"], _on(api),
                                   actions=["reboot", "not an action"])
    assert done.action == Acted.TAINTED
    assert _stored(kmock)["metadata"]["annotations"][ACTIONS_ANNOTATION] == "reboot"
    lifted = await asyncio.to_thread(apply, Status.PASS, "gpu-node-1", run, [], _on(api), rechecked=["XID_ERROR"])
    assert lifted.action == Acted.UNTAINTED
    assert ACTIONS_ANNOTATION not in _stored(kmock)["metadata"].get("annotations", {})
