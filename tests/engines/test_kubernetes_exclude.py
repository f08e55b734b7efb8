"""Moving a running Kubernetes job off nodes (`Engine.exclude`, engines/kubernetes/exclude.py), through the official
client against the project's kmock (tests/helpers/kube.py; no operator, scheduler or admission runs there: the
pods are made here as the training operator makes them, and what is asserted is what gpuval asks of the API
server). gpuval's own PyTorchJob, pinned to three nodes, gets a node affinity on each replica's template that keeps
its pods off the suspect node (its own affinity kept) and its pod on that node deleted; a PyTorchJob gpuval did not
make, and gpuval's own batch Job (whose template Kubernetes keeps once it started), get only what to do, and
nothing is sent."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from gpuval.engines.kubernetes import LABEL, KubernetesEngine
from gpuval.engines.kubernetes.client import read
from gpuval.engines.kubernetes.exclude import kept_off
from gpuval.engines.spec import Launcher
from gpuval.results.model import Status
from tests.engines.specs import nccl_spec
from tests.engines.test_kubernetes import _api, _declare
from tests.helpers.kube import run_pod

PYTORCH = "kubeflow.org/v1/pytorchjobs"
NODES = ["node-a", "node-b", "node-c"]
OFF = {"key": "metadata.name", "operator": "NotIn", "values": ["node-b"]}


def _pods(api: client.ApiClient, name: str, labels: dict[str, str]) -> None:
    """The PyTorchJob's pods as its operator and the scheduler leave them: one per node, controlled by it, running."""
    job = read(api, "PyTorchJob", name, "gpu")
    for i, node in enumerate(NODES[:2]):
        run_pod(api, f"{name}-{i}", node, labels, job)


def _sent(server, since: int = 0) -> list[str]:
    """The patches and deletes of objects (not of their status) asked of the API server after its first `since`
    requests."""
    return [f"{r.method.value} {r.url.path}" for r in list(server)[since:]
            if r.method.value in ("PATCH", "DELETE") and "/status" not in r.url.path]


@pytest.mark.asyncio
async def test_gpuvals_pytorchjob_is_kept_off_the_suspect_and_its_pod_there_made_again(kmock):
    _declare(kmock)
    api = _api(kmock)
    engine = KubernetesEngine({"namespace": "gpu", "kind": "PyTorchJob", "nodes": NODES}, api_client=api)
    job_id = await asyncio.to_thread(engine.submit, nccl_spec(launcher=Launcher.TORCHRUN, nodes=3))
    name = job_id.split("/")[2]
    await asyncio.to_thread(_pods, api, name, {LABEL: name})
    before = len(list(kmock))
    shown = await asyncio.to_thread(engine.render_exclude, job_id, ["node-b"])
    assert not _sent(kmock, before) and [s.verb for s in shown.steps] == ["patch", "delete"]  # rendering sends nothing
    done = await asyncio.to_thread(engine.exclude, job_id, ["node-b"])
    assert done.status is Status.PASS and done.excluded == ["node-b"], done
    assert _sent(kmock, before) == [f"PATCH /apis/kubeflow.org/v1/namespaces/gpu/pytorchjobs/{name}",
                                    f"DELETE /api/v1/namespaces/gpu/pods/{name}-1"]
    job = kmock.objects[PYTORCH, "gpu", name]
    for role in ("Master", "Worker"):
        affinity = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["affinity"]
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert [t["matchFields"] for t in terms] == [
            [{"key": "metadata.name", "operator": "In", "values": [node]}, OFF] for node in NODES], role
        assert affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"], role  # kept
    assert kmock.objects["v1/pods", "gpu", f"{name}-1"].deleted
    assert not kmock.objects["v1/pods", "gpu", f"{name}-0"].deleted
    again = await asyncio.to_thread(engine.render_exclude, job_id, ["node-b"])
    assert again.excluded == ["node-b"] and again.steps[0].body == done.steps[0].body  # nothing added twice


@pytest.mark.asyncio
async def test_a_job_gpuval_did_not_make_or_cannot_change_is_told_what_to_add(kmock):
    _declare(kmock)
    api = _api(kmock)
    group, version, plural = PYTORCH.split("/")
    template = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    await asyncio.to_thread(client.CustomObjectsApi(api).create_namespaced_custom_object, group, version, "gpu",
                            plural, {"apiVersion": f"{group}/{version}", "kind": "PyTorchJob",
                                     "metadata": {"name": "theirs", "namespace": "gpu"},
                                     "spec": {"pytorchReplicaSpecs": {"Master": {"template": template}}}})
    await asyncio.to_thread(_pods, api, "theirs", {"training.kubeflow.org/job-name": "theirs",
                                                   "training.kubeflow.org/operator-name": "pytorchjob-controller"})
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    told = await asyncio.to_thread(engine.exclude, "gpu/PyTorchJob/theirs", ["node-b"])
    assert told.status is Status.ERROR and not told.steps and not told.sent
    assert "was not (it has no gpuval.io/job=theirs label)" in told.advice
    assert "spec.pytorchReplicaSpecs.Master.template" in told.advice and '"values":["node-b"]' in told.advice
    assert "theirs-1 on node-b" in told.advice
    ours = KubernetesEngine({"namespace": "gpu", "kind": "Job"}, api_client=api)
    job_id = await asyncio.to_thread(ours.submit, nccl_spec(launcher=Launcher.TORCHRUN))
    before = len(list(kmock))
    told = await asyncio.to_thread(ours.exclude, job_id, ["node-b"])
    assert "a started Job's pod template cannot change" in told.advice and not told.steps
    assert not _sent(kmock, before) and not [r for r in kmock if r.method.value == "DELETE"]


def test_each_term_keeps_the_pods_off_every_node_one_name_per_requirement():
    """The API server takes one value per node field requirement, and a pod may go where any term matches."""
    two = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}}}
    terms = kept_off(two, ["n1", "n2"])["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    off = [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in ("n1", "n2")]
    assert terms == [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}], "matchFields": off},
                     {"matchFields": off}]
    assert kept_off(None, ["n1"]) == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": off[:1]}]}}}
    assert two["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0] == {
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}  # the template's own left alone


@pytest.mark.asyncio
async def test_an_mpijobs_launcher_is_left_where_its_job_keeps_it_and_said(kmock):
    """The MPI operator runs the launcher under a batch Job made once from the launcher template: a launcher pod
    deleted would come back on the same node. Its workers are made again from the patched template."""
    _declare(kmock)
    api = _api(kmock)
    engine = KubernetesEngine({"namespace": "gpu", "kind": "MPIJob"}, api_client=api)
    job_id = await asyncio.to_thread(engine.submit, nccl_spec())
    name = job_id.split("/")[2]
    job = await asyncio.to_thread(read, api, "MPIJob", name, "gpu")
    for pod, role in ((f"{name}-launcher", "lead"), (f"{name}-worker-0", "worker")):
        await asyncio.to_thread(run_pod, api, pod, "node-b", {LABEL: name, "gpuval.io/role": role}, job)
    done = await asyncio.to_thread(engine.exclude, job_id, ["node-b"])
    assert done.status is Status.PASS and [s.at("name") for s in done.steps] == [name, f"{name}-worker-0"]
    assert f"its launcher pod {name}-launcher on node-b is left" in done.steps[0].what
    assert not kmock.objects["v1/pods", "gpu", f"{name}-launcher"].deleted
    assert kmock.objects["v1/pods", "gpu", f"{name}-worker-0"].deleted
