"""`gpuval jobs diagnose` on Kubernetes, through the official client: the job object, its pods and their logs from
kmock (an in-memory Kubernetes API; it serves no pod log of its own, so each test declares the log text as an API
server would answer it), and `pods/exec` from a stand-in in front of kmock (tests/helpers/kube_exec.py: kmock 0.8
speaks no WebSocket; the stand-in answers the client's real exec request with Kubernetes' channel protocol and runs
the command on this machine, as the pod's container would).

The job's ranks are real: three gloo ranks under torchrun on this machine with gpuval.hooks' timer, the last one
slower (tests/hooks/timer_job.py); the pod that holds them is placed on node-a. The diagnosis reads the records from
the pod's log, probes the pod by exec, and names the straggler's rank on node-a.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import kmock
import pytest
from kmock import headers
from kubernetes import client

from gpuval.engines.kubernetes.client import read
from gpuval.engines.kubernetes.engine import KINDS, LABEL, KubernetesEngine
from gpuval.workloads.base import WorkloadRequest, get_workload
from gpuval.workloads.diagnose.run import DiagnoseRequest, diagnose, render_probes
from tests.helpers.kube import run_pod
from tests.helpers.kube_exec import ExecStandIn
from tests.helpers.timer_jobs import job_command, job_env, stop_job

pytestmark = pytest.mark.asyncio
PLAIN = headers({"Content-Type": "text/plain"})


def _declare(server: kmock.RawHandler) -> None:
    group, version, plural = KINDS["PyTorchJob"]
    server.resources[f"{group}/{version}/{plural}"] = {"kind": "PyTorchJob", "namespaced": True}
    for plural, kind in (("pods", "Pod"), ("services", "Service"), ("configmaps", "ConfigMap")):
        server.resources[f"v1/{plural}"] = {"kind": kind, "namespaced": True}


def _running(api: client.ApiClient, name: str, pod: str, started: datetime) -> None:
    """What the operator and the scheduler do: the job Running, its pod placed on node-a and running."""
    group, version, plural = KINDS["PyTorchJob"]
    conditions = [{"type": "Running", "status": "True", "reason": "Running"}]
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        group, version, "gpu", plural, name, {"status": {"conditions": conditions}})
    run_pod(api, pod, "node-a", {LABEL: name, "gpuval.io/role": "lead"}, read(api, "PyTorchJob", name, "gpu"),
            container="pytorch", startTime=started.isoformat())


def _records(path: Path, count: int, timeout_s: float = 150) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.count("gpuval-step") >= count:
            return text
        time.sleep(1)
    raise AssertionError(f"fewer than {count} step records in {timeout_s:.0f} s: {text[-2000:]}")


@pytest.mark.timeout(240)
async def test_a_straggler_in_a_pod_is_named_on_the_node_the_pod_runs_on(kmock, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    _declare(kmock)
    state, log = tmp_path / "ranks", tmp_path / "ranks.err"
    started = datetime.now(timezone.utc) - timedelta(seconds=2)
    with open(log, "w") as err:
        ranks = subprocess.Popen(job_command("ddp", 3, 100000, 5, 60.0), env=job_env(state), stderr=err,
                                 stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        text = await asyncio.to_thread(_records, log, 3 * 5)
        with ExecStandIn(str(kmock.url).rstrip("/"), env={"GPUVAL_HOOKS_DIR": str(state)}) as standin:
            api = client.ApiClient(client.Configuration(host=standin.url))
            engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
            spec = get_workload("train").build(WorkloadRequest(workload="train", nodes=1, run_id="run-k"))
            job_id = await asyncio.to_thread(engine.submit, spec)
            name = job_id.split("/")[2]
            await asyncio.to_thread(_running, api, name, f"{name}-master-0", started)
            kmock["get", f"/api/v1/namespaces/gpu/pods/{name}-master-0/log"] << PLAIN << text.encode()
            req = DiagnoseRequest(job_id, "20261127T120000Z-00c001", ras=False, stacks=False)
            [call] = await asyncio.to_thread(render_probes, engine, req)
            diag = await asyncio.to_thread(diagnose, engine, req)
    finally:
        stop_job(ranks)
    assert call.node == "node-a" and call.argv[:3] == ("gpuval", "jobs", "probe") and "--job" not in call.argv
    assert (call.target("pod"), call.target("container")) == (f"{name}-master-0", "pytorch")
    [sent] = standin.execs
    assert (sent.pod, sent.container, sent.command) == (f"{name}-master-0", "pytorch", list(call.argv))
    assert diag.probed == {"node-a": ""} and diag.node_of == {0: "node-a", 1: "node-a", 2: "node-a"}
    assert diag.straggler.outcome == "straggler", diag.straggler.reason
    assert [s.rank for s in diag.straggler.stragglers] == [2]
    assert [(s.node, s.sources, s.ranks) for s in diag.suspects] == [("node-a", ["straggler"], [2])]
    assert diag.hang.outcome == "progressing" and "node-a" in diag.events


async def test_an_exec_that_fails_is_that_nodes_problem(kmock, tmp_path, monkeypatch):
    """The container has no gpuval (exit 127 from the container runtime): the node's answer says so, and a job no
    node answers for is could-not-diagnose (exit 2), never an empty diagnosis."""
    from gpuval.errors import GpuvalError

    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    _declare(kmock)
    with ExecStandIn(str(kmock.url).rstrip("/"), run=lambda argv: ["sh", "-c", "echo 'gpuval: not found' >&2; "
                                                                               "exit 127"]) as standin:
        api = client.ApiClient(client.Configuration(host=standin.url))
        engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
        spec = get_workload("train").build(WorkloadRequest(workload="train", nodes=1, run_id="run-k2"))
        job_id = await asyncio.to_thread(engine.submit, spec)
        name = job_id.split("/")[2]
        await asyncio.to_thread(_running, api, name, f"{name}-master-0", datetime.now(timezone.utc))
        [out] = await asyncio.to_thread(lambda: list(engine.probe_nodes(job_id, ["node-a"], ["jobs", "probe"])))
        with pytest.raises(GpuvalError, match="could not diagnose job .*no node of it answered"):
            await asyncio.to_thread(diagnose, engine, DiagnoseRequest(job_id, "20261127T120000Z-00c002"))
    assert out.node == "node-a" and out.lines == []
    assert out.problem == f"exec in pod {name}-master-0: exit 127: gpuval: not found"
