"""Kubernetes jobs through the official client against kmock (as tests/engines/test_kubernetes.py): the status of
many jobs from one list call per namespace and kind, and a failed job that says why from its pods' logs."""

from __future__ import annotations

import asyncio

import pytest

from gpuval.engines.kubernetes import LABEL, KubernetesEngine
from gpuval.engines.spec import Launcher
from tests.engines.specs import nccl_spec
from tests.engines.test_kubernetes import PLAIN, _api, _declare, _patch_status, _pod

pytestmark = pytest.mark.asyncio


async def test_many_jobs_in_one_list_call_per_kind(kmock):
    """Three MPIJobs and two indexed Jobs, one of them cancelled (deleted): two list calls, no get per job."""
    _declare(kmock)
    api = _api(kmock)
    mpi = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    plain = KubernetesEngine({"namespace": "gpu", "kind": "Job"}, api_client=api)
    mpijobs = [await asyncio.to_thread(mpi.submit, nccl_spec(run_id=f"r{i}")) for i in range(3)]
    jobs = [await asyncio.to_thread(plain.submit, nccl_spec(launcher=Launcher.TORCHRUN, run_id=f"j{i}"))
            for i in range(2)]
    for job_id, conditions in zip(mpijobs, (["Created"], ["Created", "Running"], ["Created", "Running", "Failed"])):
        ns, kind, name = job_id.split("/")
        await asyncio.to_thread(_patch_status, api, kind, ns, name, *conditions)
    await asyncio.to_thread(_patch_status, api, "Job", "gpu", jobs[0].split("/")[2], "Complete")
    await asyncio.to_thread(plain.cancel, jobs[1])

    before = len(list(kmock))
    found = await asyncio.to_thread(mpi.statuses, [*mpijobs, *jobs])
    asked = list(kmock)[before:]
    assert [(r.method, r.url.path) for r in asked] == [
        ("GET", "/apis/kubeflow.org/v2beta1/namespaces/gpu/mpijobs"), ("GET", "/apis/batch/v1/namespaces/gpu/jobs")]
    assert all(r.params["labelSelector"] == LABEL for r in asked)
    assert [found[j].state.value for j in [*mpijobs, *jobs]] == ["pending", "running", "failed", "succeeded",
                                                                 "cancelled"]
    assert found[jobs[1]].source == "gpuval job record"


async def test_a_failed_job_says_why_from_its_pods_logs(kmock):
    _declare(kmock)
    api = _api(kmock)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    job_id = await asyncio.to_thread(engine.submit, nccl_spec())
    ns, kind, name = job_id.split("/")
    await asyncio.to_thread(_pod, api, ns, kind, name, f"{name}-launcher", "lead")
    log = (b"rank 0 starting\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
           b"RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
           b"mpirun noticed that process rank 0 with PID 7 on node w-0 exited on signal 6 (Aborted).\n")
    kmock["get", f"/api/v1/namespaces/gpu/pods/{name}-launcher/log"] << PLAIN << log
    await asyncio.to_thread(_patch_status, api, kind, ns, name, "Created", "Running", "Failed")
    ended = await asyncio.to_thread(engine.wait, job_id, 10, 0.1)
    assert ended.state.value == "failed"
    assert ended.why == ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
                         "mpirun noticed that process rank 0 with PID 7 on node w-0 exited on signal 6 (Aborted)."]
    assert ended.output == f"gpuval jobs logs {job_id} --on kubernetes"


async def test_the_one_client_never_touches_the_librarys_global_configuration(kmock, tmp_path, monkeypatch):
    """The engine built its client through load_kube_config into the library's global default: a second caller
    in the process (another context, the node it taints) would have changed it. Now each client is its own."""
    from kubernetes import client

    from gpuval.engines.kubernetes.client import api_client
    from tests.helpers.kube import kubeconfig_for

    _declare(kmock)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(kmock, tmp_path / "kubeconfig")))
    before = client.Configuration.get_default_copy().host
    engine = KubernetesEngine({"namespace": "gpu"})
    job_id = await asyncio.to_thread(engine.submit, nccl_spec())
    assert (await asyncio.to_thread(engine.status, job_id)).state.value == "pending"
    built = api_client(pool_size=3)
    assert built.configuration.host == str(kmock.url).rstrip("/") and built.configuration.connection_pool_maxsize == 3
    assert client.Configuration.get_default_copy().host == before != built.configuration.host
