"""`gpuval fleet retest` on Kubernetes, through the official client against kmock (an in-memory Kubernetes API
emulator on 127.0.0.1; no API server can run here), with test_run_kubernetes.py's kubelet stand-in playing a fleet
where k5 is 40% slow across nodes. gpuval has tainted k1 and k5 with FLEET_SLOW (through operate.node_state), each
with its conviction's evidence bundle; k2 carries a person's taint. The re-test's pods on the held nodes tolerate
gpuval's taint; k1 passes and is untainted, k5 fails and keeps its taint, k2 keeps the person's taint."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.kubernetes.nodes import TAINT_KEY, KubernetesNodes
from gpuval.engines.kubernetes.site import KubernetesSite
from gpuval.fleet.convictions import settings_json
from gpuval.fleet.expect import message_sizes
from gpuval.fleet.job import JobSettings
from gpuval.fleet.model import FleetConfig
from gpuval.fleet.release import ReleaseRequest, retest_held
from gpuval.operate.evidence import Conviction, write_bundle
from gpuval.operate.node_state import apply
from gpuval.results.model import Status
from tests.fleet.test_run_kubernetes import _api, _cluster, _kubelet, _pinned

pytestmark = pytest.mark.asyncio
RUN = "20261127T120000Z-f1ee71"


def _hold(api, state, node: str) -> None:
    """Taint `node` as a fleet check's drain does, and keep its conviction's bundle."""
    action = apply(Status.FAIL, node, RUN, ["FLEET_SLOW"], KubernetesNodes(lambda: api))
    settings = settings_json(JobSettings(run_id=RUN, sizes=message_sizes(None, 1 << 20), image="img:1"),
                             FleetConfig())
    write_bundle(state, None, "fleet check", Conviction(RUN, [], [], action, {"settings": settings}))


async def test_retest_on_kubernetes_untaints_the_node_that_passes_only(kmock, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    api = _api(kmock)
    await asyncio.to_thread(_cluster, kmock, api)
    for node in ("k1", "k5"):
        await asyncio.to_thread(_hold, api, tmp_path / "state", node)
    person = {"key": "example.com/maintenance", "effect": "NoSchedule"}  # a person's own taint on k2
    await asyncio.to_thread(client.CoreV1Api(api).patch_node, "k2", {"spec": {"taints": [person]}},
                            _content_type="application/merge-patch+json")
    site = KubernetesSite(KubernetesEngine({"namespace": "gpu"}, api_client=api))
    req = ReleaseRequest(on="kubernetes", run_id="20261127T130000Z-f1ee72", partners="k4,k6", poll_s=0.05,
                        results=tmp_path / "r.jsonl", evidence_dir=tmp_path / "state")

    stop, seen = asyncio.Event(), []
    kubelet = asyncio.create_task(_kubelet(kmock, api, stop, seen))
    try:
        done = await asyncio.to_thread(retest_held, req, site=site)
    finally:
        stop.set()
        await kubelet

    assert {a["node"]: (a["verdict"], a["action"]) for a in done.actions} == \
        {"k1": ("pass", "lifted"), "k5": ("fail", "kept drained")}, done.actions
    assert done.exit_code == 1
    taints = {n: [t["key"] for t in kmock.objects["v1/nodes", None, n]["spec"].get("taints") or []]
              for n in ("k1", "k5")}
    assert taints == {"k1": [], "k5": [TAINT_KEY]}
    assert kmock.objects["v1/nodes", None, "k2"]["spec"]["taints"] == [person]
    pinned = [(body, _pinned(body["spec"]["template"] if body["kind"] == "Job" else
                             body["spec"]["pytorchReplicaSpecs"]["Master"]["template"])) for body in seen]
    assert {n for _, nodes in pinned for n in nodes} == {"k1", "k4", "k5", "k6"}
    for body, nodes in pinned:  # only jobs pinned to a held node tolerate gpuval's taint
        template = body["spec"]["template"] if body["kind"] == "Job" else \
            body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        keys = {t.get("key") for t in template["spec"].get("tolerations") or []}
        assert (TAINT_KEY in keys) == bool({"k1", "k5"} & set(nodes)), nodes
