"""The fleet check on Kubernetes, through the official client against kmock (an in-memory Kubernetes API emulator on
127.0.0.1; no API server can run here): the nodes come from the nodes API (a cordoned node is reported, not
tested), the switches from a node label, every round's jobs are created in the emulator pinned to their nodes (node
affinity on the names, one pod per node), their pods' logs are read back, the verdicts name the faulty nodes, and
--drain taints them through operate and keeps each one's evidence bundle.

The test plays the cluster: a kubelet stand-in watches the jobs gpuval creates, starts one pod per pinned node (the
node's name where GPUVAL_NODE_NAME would carry it), answers each pod's log with the lines `gpuval fleet node-test` /
`rank-test` print (lines.line, the workers' own format) for a fleet where k3's ranks crash in every multi-node job
and k5 is 40% slow across nodes, and marks the job finished the way the Job controller or the training operator
does. kmock ignores label selectors on pod listings, so every job's log read returns every pod: the reader must keep
only its own round's and test's lines. The manifests it receives are checked against the Kubernetes and Kubeflow
schemas in test_job.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

import kmock
import pytest
from kmock import headers
from kubernetes import client

from gpuval.engines.kubernetes import KINDS, LABEL, KubernetesEngine
from gpuval.engines.kubernetes.client import read
from gpuval.engines.kubernetes.nodes import TAINT_KEY
from gpuval.fleet.plan.expect import message_sizes
from gpuval.fleet.run.job import JobSettings
from gpuval.fleet.run.lines import line
from gpuval.fleet.plan.terms import FleetConfig
from gpuval.fleet.run.driver import FleetRun, fleet_nodes
from tests.helpers.kube import controlled_by

pytestmark = pytest.mark.asyncio
PLAIN = headers({"Content-Type": "text/plain"})
SWITCH = "example.com/leaf-switch"
# GPU Feature Discovery's label of a GB200 node's NVLink domain (awslabs/awsome-distributed-ai#876 schedules on it)
RACK, CLIQUE = "nvidia.com/gpu.clique", "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"
NODES = [f"k{i}" for i in range(1, 7)]
BROKEN, SLOW = "k3", "k5"


def _api(server: kmock.RawHandler) -> client.ApiClient:
    configuration = client.Configuration(host=str(server.url).rstrip("/"))
    configuration.connection_pool_maxsize = 32  # the check's status polls and log reads run side by side
    return client.ApiClient(configuration)


def _cluster(server: kmock.RawHandler, api: client.ApiClient) -> None:
    for kind, (group, version, plural) in KINDS.items():
        server.resources[f"{group}/{version}/{plural}"] = {"kind": kind, "namespaced": True}
    for plural, kind in (("pods", "Pod"), ("services", "Service"), ("configmaps", "ConfigMap")):
        server.resources[f"v1/{plural}"] = {"kind": kind, "namespaced": True}
    server.resources["v1/nodes"] = {"kind": "Node", "namespaced": False}
    core = client.CoreV1Api(api)
    for i, name in enumerate([*NODES, "k7"]):
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "resourceVersion": "1",
                                       "labels": {SWITCH: "leaf-a" if i < 3 else "leaf-b",
                                                  **({RACK: CLIQUE} if i < 2 else {})}},
                          "spec": {"unschedulable": name == "k7", "taints": []},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@dataclass
class Faults:
    """The fleet's faults: `broken`'s ranks crash in every multi-node job, `slow` is 40% slow across nodes, the node
    test of a node in `crash` dies right after its start line (read at each job: a test may repair a node)."""

    broken: str | None = BROKEN
    slow: str | None = SLOW
    crash: set[str] = field(default_factory=set)


def _lines(argv: list[str], nodes: list[str], faults: Faults) -> dict[str, str]:
    """What each pinned node's pod prints for the job's command (the workers' format, a fleet with `faults`)."""
    crash = set(faults.crash)
    index = int(_arg(argv, "--round"))
    samples = int(_arg(argv, "--samples"))
    if "node-test" in argv:
        return {n: line("start", round=index, node=n) + "\n" if n in crash else "\n".join([
            line("start", round=index, node=n),
            line("suite", round=index, node=n, status="pass", reason="17 checks pass"),
            line("samples", round=index, node=n, collective="all_reduce", busbw=[
                200.0 * (1 + 0.004 * (k % 5 - 2)) for k in range(samples)], ranks=8)]) + "\n" for n in nodes}
    test = _arg(argv, "--test")
    out = {n: line("start", round=index, test=test, node=n, rank=r) + "\n" for r, n in enumerate(nodes)}
    broken = faults.broken
    if broken is not None and broken in nodes:
        out[broken] += line("error", round=index, test=test, node=broken, rank=nodes.index(broken),
                            error="Connection reset by peer") + "\n"
        return out
    speed = 0.6 if faults.slow in nodes else 1.0
    for coll, nominal in (("all_reduce", 188.0), ("sendrecv", 45.0)):
        figures = [nominal * speed * (1 + 0.004 * (k % 5 - 2)) for k in range(samples)]
        out[nodes[0]] += line("samples", round=index, test=test, node=nodes[0], collective=coll, busbw=figures,
                              hosts=nodes, ranks=len(nodes)) + "\n"
    return out


def _pinned(template: dict) -> list[str]:
    terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [value for term in terms["nodeSelectorTerms"] for value in term["matchFields"][0]["values"]]


async def _kubelet(server: kmock.RawHandler, api: client.ApiClient, stop: asyncio.Event, seen: list[dict],
                   faults: Faults | None = None) -> None:
    """Runs every job gpuval creates: pods on the pinned nodes, their logs, the finished status."""
    faults = faults or Faults()
    done: set[str] = set()
    core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
    while not stop.is_set():
        for request in list(server):
            body = request.data if isinstance(request.data, dict) else {}
            kind, name = body.get("kind"), (body.get("metadata") or {}).get("name")
            if request.method != "POST" or kind not in ("Job", "PyTorchJob") or name in done:
                continue
            done.add(name)
            seen.append(body)
            if kind == "Job":
                template = body["spec"]["template"]
            else:
                template = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            container = template["spec"]["containers"][0]
            assert {"name": "GPUVAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
                container["env"]
            nodes = _pinned(template)
            owner = controlled_by(await asyncio.to_thread(read, api, kind, name, "gpu"))  # the job controls its pods
            for i, (node, text) in enumerate(_lines(container["command"], nodes, faults).items()):
                pod = f"{name}-{i}"
                server["get", f"/api/v1/namespaces/gpu/pods/{pod}/log"] << PLAIN << text.encode()
                await asyncio.to_thread(core.create_namespaced_pod, "gpu", {
                    "metadata": {"name": pod, "namespace": "gpu", "labels": {LABEL: name}, "ownerReferences": [owner]},
                    "spec": {"nodeName": node, "containers": [{"name": "main", "image": "img:1"}]}})
            condition = {"type": "Complete" if kind == "Job" else "Succeeded", "status": "True"}
            status = {"status": {"conditions": [condition]}}
            if kind == "Job":
                await asyncio.to_thread(batch.patch_namespaced_job_status, name, "gpu", status)
            else:
                group, version, plural = KINDS[kind]
                await asyncio.to_thread(custom.patch_namespaced_custom_object_status, group, version, "gpu", plural,
                                        name, status)
        await asyncio.sleep(0.05)


async def test_fleet_check_on_kubernetes_names_the_faulty_nodes_and_taints_them(kmock, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    api = _api(kmock)
    await asyncio.to_thread(_cluster, kmock, api)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    site = engine.site(switch_label=SWITCH)
    settings = JobSettings(run_id="20260101T000000Z-f1ee78", sizes=message_sizes(None, 1 << 20), image="img:1")
    run = FleetRun(site, settings, replace(FleetConfig(), seed=3), poll_s=0.05, results_path=tmp_path / "r.jsonl",
                   evidence_dir=tmp_path / "state")

    assert await asyncio.to_thread(fleet_nodes, site, 6, None) == NODES  # k7 is cordoned
    assert await asyncio.to_thread(site.unavailable, ["k1", "k7", "k9"]) == {"k7": "cordoned (unschedulable)",
                                                                           "k9": "no such node"}
    groups = await asyncio.to_thread(site.groups, NODES)
    assert groups == {n: "leaf-a" if n in ("k1", "k2", "k3") else "leaf-b" for n in NODES}
    assert await asyncio.to_thread(site.racks, NODES) == {}  # no --rack-label: racks from the nodes' own domains
    labelled = engine.site(rack_label=RACK)  # a node without the label is in no rack
    assert await asyncio.to_thread(labelled.racks, NODES) == {"k1": CLIQUE, "k2": CLIQUE}
    assert labelled.rack_source == f"the node label {RACK}"

    stop, seen = asyncio.Event(), []
    kubelet = asyncio.create_task(_kubelet(kmock, api, stop, seen))
    try:
        outcome = await asyncio.to_thread(run.check, [*NODES, "k7"], groups)
        await asyncio.to_thread(run.conclude, outcome, True)  # --drain
    finally:
        stop.set()
        await kubelet

    status = {n: v.status.value for n, v in outcome.verdicts.nodes.items()}
    assert status == {"k1": "pass", "k2": "pass", "k3": "fail", "k4": "pass", "k5": "fail", "k6": "pass",
                      "k7": "error"}, {n: v.reason for n, v in outcome.verdicts.nodes.items()}
    assert outcome.verdicts.nodes["k7"].reason == "could not run: not available (cordoned (unschedulable))"
    assert outcome.exclude == "k3,k5" and outcome.exit_code == 1
    assert outcome.codes[BROKEN] == ["FLEET_BROKEN"] and outcome.codes[SLOW] == ["FLEET_SLOW"]
    # Round 0: one indexed Job, one pod per node; then a job per pair test, each pinned to its two nodes.
    assert seen[0]["kind"] == "Job" and _pinned(seen[0]["spec"]["template"]) == NODES
    assert seen[0]["spec"]["completions"] == 6
    pinned = {b["metadata"]["name"]: _pinned(b["spec"]["pytorchReplicaSpecs"]["Master"]["template"])
              for b in seen if b["kind"] == "PyTorchJob"}
    pairs = {name: nodes for name, nodes in pinned.items() if "-scale-" not in name}
    assert pairs and all(len(nodes) == 2 for nodes in pairs.values())
    screen = [nodes for name, nodes in pairs.items() if "-r1-screen-" in name]
    assert len(screen) == 3 and sum(groups[a] == groups[b] for a, b in screen) == 2  # inside each leaf first
    [scale] = [nodes for name, nodes in pinned.items() if "-scale-" in name]
    assert sorted(scale) == ["k1", "k2", "k4", "k6"]  # the full scale: the nodes that passed

    assert {a["node"]: a["action"] for a in outcome.to_json()["actions"]} == {BROKEN: "tainted", SLOW: "tainted"}
    for node in (BROKEN, SLOW):
        taints = kmock.objects["v1/nodes", None, node]["spec"]["taints"]
        assert any(t["key"] == TAINT_KEY for t in taints)
        # a taint keeps its evidence as a drain does (before: only a Slurm drain's action kept a bundle)
        [bundle] = (tmp_path / "state" / "evidence" / node).glob("*.yaml")
        assert bundle.name == f"{settings.run_id}.yaml"
    assert not kmock.objects["v1/nodes", None, "k1"]["spec"]["taints"]
