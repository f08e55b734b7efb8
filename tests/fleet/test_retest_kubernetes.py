"""Take a node out, keep why, bring it back, on Kubernetes: through the official client against kmock (an in-memory
Kubernetes API emulator on 127.0.0.1; no API server can run here), with test_run_kubernetes.py's kubelet stand-in
playing the fleet. A node is convicted by crashing (its node test's pod dies right after its start line), never by a
slowness, so every verdict is certain.

1. A fleet check with --drain (FleetRun.check, then conclude) of k1..k6, k1 and k5 crashing: both tainted, each with
   its evidence bundle where the check ran (before: a taint kept none).
2. `gpuval nodes --on kubernetes` (the CLI, its kubeconfig pointing at kmock) lists them, each bundle on disk.
3. k1 repaired, a person's taint on k2, `gpuval fleet retest` (retest_held on the check's site) with the partners
   k4 and k6: the re-test's pods on the held nodes tolerate gpuval's taint; k1 passes and is untainted, k5 fails and
   keeps its taint, k2 keeps the person's taint."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.kubernetes.nodes import TAINT_KEY
from gpuval.fleet.run.driver import FleetRun
from gpuval.fleet.plan.expect import message_sizes
from gpuval.fleet.run.job import JobSettings
from gpuval.fleet.plan.terms import FleetConfig
from gpuval.fleet.act.retests import RetestRequest, retest_held
from tests.conftest import run_gpuval
from tests.fleet.test_run_kubernetes import NODES, Faults, _api, _cluster, _kubelet, _pinned
from tests.helpers.kube import kubeconfig_for

pytestmark = pytest.mark.asyncio
RUN = "20261127T120000Z-f1ee71"


def _template(body: dict) -> dict:
    return body["spec"]["template"] if body["kind"] == "Job" else \
        body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]


def _taints(kmock, node: str) -> list[dict]:
    return kmock.objects["v1/nodes", None, node]["spec"].get("taints") or []


async def test_a_taint_keeps_its_bundle_nodes_shows_it_and_retest_lifts_a_pass_and_keeps_a_fail(kmock, monkeypatch,
                                                                                                tmp_path: Path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    state = tmp_path / "state"
    api = _api(kmock)
    await asyncio.to_thread(_cluster, kmock, api)
    site = KubernetesEngine({"namespace": "gpu"}, api_client=api).site()
    settings = JobSettings(run_id=RUN, sizes=message_sizes(None, 1 << 20), image="img:1")
    run = FleetRun(site, settings, replace(FleetConfig(), seed=3), poll_s=0.05, results_path=tmp_path / "r.jsonl",
                   evidence_dir=state)
    stop, seen, faults = asyncio.Event(), [], Faults(broken=None, slow=None, crash={"k1", "k5"})
    kubelet = asyncio.create_task(_kubelet(kmock, api, stop, seen, faults))
    try:
        outcome = await asyncio.to_thread(run.check, NODES)
        await asyncio.to_thread(run.conclude, outcome, True)  # --drain
        assert {a["node"]: a["action"] for a in outcome.to_json()["actions"]} == {"k1": "tainted", "k5": "tainted"}
        assert outcome.codes["k1"] == ["FLEET_NODE_CRASH"]

        listed = await asyncio.to_thread(run_gpuval, "nodes", "--on", "kubernetes", "--json", env={
            "KUBECONFIG": str(kubeconfig_for(kmock, tmp_path / "kubeconfig")), "GPUVAL_STATE_DIR": str(state)})
        assert listed.returncode == 0, listed.stderr
        held = {h["node"]: h for h in json.loads(listed.stdout)}
        assert sorted(held) == ["k1", "k5"]
        for node in ("k1", "k5"):  # a taint names no run: the node's newest bundle, where the check ran
            bundle = Path(held[node]["evidence"].removesuffix(" where the fleet check ran"))
            assert bundle == state / "evidence" / node / f"{RUN}.yaml" and bundle.is_file(), held[node]

        faults.crash.discard("k1")  # k1 repaired
        person = {"key": "example.com/maintenance", "effect": "NoSchedule"}
        await asyncio.to_thread(client.CoreV1Api(api).patch_node, "k2", {"spec": {"taints": [person]}},
                                _content_type="application/merge-patch+json")
        seen.clear()
        req = RetestRequest(on="kubernetes", run_id="20261127T130000Z-f1ee72", partners="k4,k6", poll_s=0.05,
                             results=tmp_path / "r.jsonl", evidence_dir=state)
        done = await asyncio.to_thread(retest_held, req, site=site)
    finally:
        stop.set()
        await kubelet

    assert {a.node: (a.verdict.value, a.action.value) for a in done.actions} == \
        {"k1": ("pass", "lifted"), "k5": ("fail", "kept drained")}, done.actions
    assert done.exit_code == 1
    assert {n: [t["key"] for t in _taints(kmock, n)] for n in ("k1", "k5")} == {"k1": [], "k5": [TAINT_KEY]}
    assert _taints(kmock, "k2") == [person]
    pinned = [(body, _pinned(_template(body))) for body in seen]
    assert {n for _, nodes in pinned for n in nodes} == {"k1", "k4", "k5", "k6"}
    for body, nodes in pinned:  # only jobs pinned to a held node tolerate gpuval's taint
        keys = {t.get("key") for t in _template(body)["spec"].get("tolerations") or []}
        assert (TAINT_KEY in keys) == bool({"k1", "k5"} & set(nodes)), nodes
