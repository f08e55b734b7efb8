"""A job's own objects on Kubernetes (engines/kubernetes/owned.py): gpuval deletes only what it made, and says so by
its label and by owner references (reliability-4 D13, D14). Through the official client against the project's kmock
(tests/helpers/kube.py's ApiServer: it gives each object a uid and honours label selectors, as an API server does; it
runs no garbage collector, so an owner reference is checked as written, not by what the collector would delete).
"""

from __future__ import annotations

import asyncio

import kmock
import pytest
from kubernetes import client

from gpuval.engines.kubernetes import LABEL, KubernetesEngine
from gpuval.engines.spec import Launcher
from gpuval.errors import EngineError, UsageError
from tests.conftest import run_gpuval
from tests.engines.specs import nccl_spec
from tests.engines.test_kubernetes import _api, _declare
from tests.helpers.kube import kubeconfig_for

pytestmark = pytest.mark.asyncio
SECRET_ENV = {"HF_TOKEN": "hf_s3cr3t", "GPUVAL_DB": "postgresql://gv:pa55@db/gv"}
RESOURCES = {"Job": "batch/v1/jobs", "MPIJob": "kubeflow.org/v2beta1/mpijobs",
             "PyTorchJob": "kubeflow.org/v1/pytorchjobs"}


def _cluster(server: kmock.RawHandler) -> None:
    _declare(server)
    server.resources["v1/secrets"] = {"kind": "Secret", "namespaced": True}


def _teams_own(api: client.ApiClient) -> None:
    """A team's own Job `web` with its Service, its `web-env` Secret and a `web-nccl-topology` ConfigMap, none of
    them made by gpuval."""
    core, meta = client.CoreV1Api(api), {"namespace": "gpu", "labels": {"app": "web"}}
    client.BatchV1Api(api).create_namespaced_job("gpu", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "web", **meta}, "spec": {"template": {"spec": {"containers": [{"name": "web", "image": "web:1"}],
                                                                "restartPolicy": "Never"}}}})
    core.create_namespaced_service("gpu", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", **meta},
                                           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})
    core.create_namespaced_secret("gpu", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-env", **meta},
                                          "stringData": {"DB_PASSWORD": "team-pw"}})
    core.create_namespaced_config_map("gpu", {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "web-nccl-topology", **meta}, "data": {"a": "b"}})


async def test_cancel_leaves_a_job_gpuval_did_not_make_and_says_why(kmock, tmp_path):
    """D13: `jobs cancel gpu/Job/web` deleted the team's Job, Service, Secret and ConfigMap. Now nothing is deleted,
    and the command says in one line what it left and why (exit 2)."""
    _cluster(kmock)
    await asyncio.to_thread(_teams_own, _api(kmock))
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=_api(kmock))
    with pytest.raises(UsageError, match=f"not made by gpuval .*no {LABEL}=web label.*left as they are"):
        await asyncio.to_thread(engine.cancel, "gpu/Job/web")
    proc = await asyncio.to_thread(run_gpuval, "jobs", "cancel", "gpu/Job/web", "--on", "kubernetes",
                                   env={"KUBECONFIG": str(kubeconfig_for(kmock, tmp_path / "kubeconfig"))})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ("Service web, ConfigMap web-nccl-topology, Secret web-env, ComputeDomain web-compute-domain are left as "
            "they are") in proc.stderr
    for resource, name in (("batch/v1/jobs", "web"), ("v1/services", "web"), ("v1/secrets", "web-env"),
                           ("v1/configmaps", "web-nccl-topology")):
        assert not kmock.objects[resource, "gpu", name].deleted, resource
    assert not [r for r in kmock if r.method == "DELETE"]


async def test_cancel_deletes_the_jobs_own_objects_and_names_a_namesake_it_left(kmock, tmp_path):
    """gpuval's indexed Job, with its Service and topology ConfigMap: cancel deletes the three. A Secret under the
    job's `-env` name that someone else made (the job had no secret of its own) is left, and named."""
    _cluster(kmock)
    topo = tmp_path / "topo.xml"
    topo.write_text("<system/>\n")
    engine = KubernetesEngine({"namespace": "gpu", "kind": "Job", "topology_source": str(topo)},
                              api_client=_api(kmock))
    job_id = await asyncio.to_thread(engine.submit, nccl_spec(launcher=Launcher.TORCHRUN))
    name = job_id.split("/")[2]
    await asyncio.to_thread(client.CoreV1Api(_api(kmock)).create_namespaced_secret, "gpu", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-env", "namespace": "gpu"},
        "stringData": {"X": "theirs"}})
    with pytest.raises(EngineError, match=f"cancelled; left Secret {name}-env as it is: it has no {LABEL}={name}"):
        await asyncio.to_thread(engine.cancel, job_id)
    for resource, obj in (("batch/v1/jobs", name), ("v1/services", name), ("v1/configmaps", f"{name}-nccl-topology")):
        assert kmock.objects[resource, "gpu", obj].deleted, resource
    assert not kmock.objects["v1/secrets", "gpu", f"{name}-env"].deleted
    assert (await asyncio.to_thread(engine.status, job_id)).state.value == "cancelled"


@pytest.mark.parametrize("kind,launcher", [("Job", Launcher.TORCHRUN), ("MPIJob", Launcher.MPI),
                                           ("PyTorchJob", Launcher.TORCHRUN)])
async def test_the_jobs_own_objects_are_owned_by_the_job(kmock, tmp_path, kind, launcher):
    """D14: once the job exists, its Secret, topology ConfigMap and (indexed Job) Service name it as their owner,
    by its apiVersion, kind, name and uid, neither as controller nor blocking its deletion (owned.py says why), so
    the API server's garbage collector deletes them with the job however it goes."""
    _cluster(kmock)
    topo = tmp_path / "topo.xml"
    topo.write_text("<system/>\n")
    engine = KubernetesEngine({"namespace": "gpu", "kind": kind, "topology_source": str(topo)},
                              api_client=_api(kmock))
    name = (await asyncio.to_thread(engine.submit, nccl_spec(launcher=launcher, env=SECRET_ENV))).split("/")[2]
    job = kmock.objects[RESOURCES[kind], "gpu", name]
    owner = {"apiVersion": job["apiVersion"], "kind": kind, "name": name, "uid": job["metadata"]["uid"],
             "controller": False, "blockOwnerDeletion": False}
    owned = [("v1/secrets", f"{name}-env"), ("v1/configmaps", f"{name}-nccl-topology")]
    owned += [("v1/services", name)] if kind == "Job" else []
    for resource, obj in owned:
        assert kmock.objects[resource, "gpu", obj]["metadata"]["ownerReferences"] == [owner], resource
    assert job["apiVersion"] == {"Job": "batch/v1", "MPIJob": "kubeflow.org/v2beta1",
                                 "PyTorchJob": "kubeflow.org/v1"}[kind]


@pytest.mark.parametrize("refusal", [422, 409])
async def test_a_refused_job_leaves_no_secret_behind(kmock, refusal):
    """D14: the MPIJob's create refused (422 from an admission webhook; 409, a job of that name exists already,
    someone else's): the Secret created before it is deleted, the other job stays, and the error is the API's."""
    _cluster(kmock)
    api = _api(kmock)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    spec = nccl_spec(env=SECRET_ENV)
    name = engine.render(spec).job_name
    path = "/apis/kubeflow.org/v2beta1/namespaces/gpu/mpijobs"
    if refusal == 422:
        kmock["post", path] << 422 << {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
                                       "reason": "Invalid", "message": "denied by the admission webhook"}
    else:
        await asyncio.to_thread(client.CustomObjectsApi(api).create_namespaced_custom_object, "kubeflow.org",
                                "v2beta1", "gpu", "mpijobs", {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                                                              "metadata": {"name": name, "namespace": "gpu"}})
    with pytest.raises(EngineError, match=f"kubernetes create MPIJob {name}: {refusal}"):
        await asyncio.to_thread(engine.submit, spec)
    assert kmock.objects["v1/secrets", "gpu", f"{name}-env"].deleted
    deletes = [r.url.path for r in kmock if r.method == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/gpu/secrets/{name}-env"]  # nothing else: the other job stays


async def test_a_job_whose_secret_cannot_be_owned_is_not_left_running(kmock):
    """The owner reference refused (403: the user may create Secrets but not patch them): the job is deleted with
    its Secret, so no job runs whose Secret would outlive it, and the error names the right that is missing."""
    _cluster(kmock)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=_api(kmock))
    spec = nccl_spec(env=SECRET_ENV)
    name = engine.render(spec).job_name
    kmock["patch", f"/api/v1/namespaces/gpu/secrets/{name}-env"] << 403 << {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden"}
    with pytest.raises(EngineError, match=f"kubernetes patch Secret {name}-env: 403"):
        await asyncio.to_thread(engine.submit, spec)
    deletes = [r.url.path for r in kmock if r.method == "DELETE"]
    assert deletes == [f"/apis/kubeflow.org/v2beta1/namespaces/gpu/mpijobs/{name}",
                       f"/api/v1/namespaces/gpu/secrets/{name}-env"]
    assert kmock.objects["kubeflow.org/v2beta1/mpijobs", "gpu", name].deleted
    assert kmock.objects["v1/secrets", "gpu", f"{name}-env"].deleted
