"""Any job's pods on Kubernetes (engines/kubernetes/pods.py), and a probe's exec output, bounded (reliability-4 D15
and its "not concluded" flood). Through the official client against the project's kmock (tests/helpers/kube.py's
ApiServer honours label selectors, as an API server does, so a wrong selector finds no pod here too; kmock alone
listed every pod). The test plays the operators: it creates each job's pods with the labels and the controller owner
reference the training operator, the MPI Operator and the Job controller put on them (their sources, cited in
pods.py; kmock runs no operator and no garbage collector, so what a pod's references say is what the test wrote),
beside pods of other jobs that share a name or a label with them. The exec is tests/helpers/kube_exec.py's
stand-in, which runs the command here.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from gpuval.engines.base import JobUnreachable
from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.kubernetes.client import created
from gpuval.engines.kubernetes.pods import EXEC_OUTPUT_BYTES
from gpuval.engines.kubernetes.manifests import LABEL
from tests.engines.test_kubernetes import _api, _declare
from tests.helpers.kube import controlled_by, run_pod
from tests.helpers.kube_exec import ExecStandIn

pytestmark = pytest.mark.asyncio
KF, OP, ROLE = "training.kubeflow.org/job-name", "training.kubeflow.org/operator-name", "training.kubeflow.org/job-role"
UID = "{uid}"  # in a batch Job's pods: the uid the API server gave the Job (`_job`)
EARLIER = "5d1c0a7e-2b4f-4e8a-9c3d-1f0e6b7a8c9d"  # the uid of an earlier job of the same name, deleted since
API = {"Job": "batch/v1", "PyTorchJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1"}
# Who controls a pod: the job itself, the batch Job the MPIJob runs its launcher under (LAUNCHER), nothing (None).
JOB, LAUNCHER = "job", "launcher"
# Per kind: the job's pods (name, node, labels, controller), the lead first, and pods of other jobs that the
# selectors must leave out.
PODS = {
    "PyTorchJob": ([("foreign-master-0", "node-a", {KF: "foreign", OP: "pytorchjob-controller", ROLE: "master"}, JOB),
                    ("foreign-worker-0", "node-b", {KF: "foreign", OP: "pytorchjob-controller"}, JOB)],
                   [("tf-foreign-ps-0", "node-z", {KF: "foreign", OP: "tfjob-controller"}, None)]),  # a TFJob's
    "MPIJob": ([("foreign-launcher-x1", "node-c", {KF: "foreign", OP: "mpi-operator", ROLE: "launcher"}, LAUNCHER),
                ("foreign-worker-0", "node-c", {KF: "foreign", OP: "mpi-operator", ROLE: "worker"}, JOB),
                ("foreign-worker-1", "node-d", {KF: "foreign", OP: "mpi-operator", ROLE: "worker"}, JOB)],
               [("pt-foreign-master-0", "node-z", {KF: "foreign", OP: "pytorchjob-controller"}, None)]),
    "Job": ([("foreign-0-abcde", "node-e", {"batch.kubernetes.io/job-name": "foreign", "job-name": "foreign",
                                            "batch.kubernetes.io/controller-uid": UID, "controller-uid": UID,
                                            "batch.kubernetes.io/job-completion-index": "0"}, JOB),
             ("foreign-1-fghij", "node-f", {"job-name": "foreign", "controller-uid": UID}, JOB)],  # before 1.27
            [("old-pt-foreign-0", "node-z", {"job-name": "foreign", "group-name": "kubeflow.org"}, None)]),  # v1.5
}


def _job(api: client.ApiClient, kind: str, name: str) -> dict:
    """A job `kind` `name` of someone else's (no gpuval label), as its user creates it, as created."""
    return created(api, {"apiVersion": API[kind], "kind": kind, "metadata": {"name": name, "namespace": "gpu"},
                         "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "i"}],
                                                        "restartPolicy": "Never"}}}})


def _launcher(api: client.ApiClient, mpijob: dict) -> dict:
    """What the MPI Operator v0.4+ makes for an MPIJob's launcher (`newLauncherJob`): a batch Job it controls."""
    name = mpijob["metadata"]["name"] + "-launcher"
    return created(api, {"apiVersion": "batch/v1", "kind": "Job",
                         "metadata": {"name": name, "namespace": "gpu", "ownerReferences": [controlled_by(mpijob)]},
                         "spec": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}}})


def _run_pods(api: client.ApiClient, kind: str, pods: list[tuple], job: dict | None) -> None:
    """What the operators and the scheduler do: each pod created with its labels (UID: the batch Job's uid) and its
    controller owner reference (JOB: `job`; LAUNCHER: the MPIJob's launcher Job), placed and running."""
    launcher = _launcher(api, job) if job and any(owner == LAUNCHER for *_, owner in pods) else None
    for name, node, labels, owner in pods:
        uid = (job or {}).get("metadata", {}).get("uid", "")
        labels = {key: uid if value == UID else value for key, value in labels.items()}
        run_pod(api, name, node, labels, {JOB: job, LAUNCHER: launcher, None: None}[owner])


@pytest.mark.parametrize("kind", list(PODS))
async def test_a_job_gpuval_did_not_submit_is_found_by_its_controllers_labels(kmock, kind):
    """D15: a PyTorchJob, an MPIJob and a batch Job of someone else's: `jobs diagnose` (placement, the probe's
    calls) found none of their pods ("none of its 0 pod(s) runs now"), since it asked for gpuval's label only.
    Now their operators' labels find exactly their pods, the lead pod first (an MPIJob's launcher under the batch
    Job the operator made for it); a TFJob, a PyTorchJob or an old training operator's pod that shares the job's
    name is left out."""
    _declare(kmock)
    api = _api(kmock)
    own, others = PODS[kind]
    job = await asyncio.to_thread(_job, api, kind, "foreign")
    await asyncio.to_thread(_run_pods, api, kind, [*others, *own], job)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    job_id = f"gpu/{kind}/foreign"
    placement = await asyncio.to_thread(engine.placement, job_id)
    assert placement.nodes == list(dict.fromkeys(node for _, node, _, _ in own))
    calls = await asyncio.to_thread(engine.render_probe, job_id, placement.nodes, ["jobs", "probe"])
    assert calls[0].target("pod") == own[0][0]  # on the lead's node, the lead pod is the one probed


async def test_pods_left_by_an_earlier_job_of_the_same_name_are_not_the_jobs(kmock):
    """Red team 5 N7: a batch Job's pods were matched by the presence of `controller-uid`, not its value, so a pod an
    earlier Job `foreign` left running (deleted with --cascade=orphan: the pod keeps its labels, the earlier Job's
    uid in them) was taken as the job's, and its node probed and nominated. Now the selectors ask for the uid of
    the Job read, as the Job controller's own selector does; a Job that is gone has no pods, whatever is left."""
    _declare(kmock)
    api = _api(kmock)
    job = await asyncio.to_thread(_job, api, "Job", "foreign")
    labels = {"batch.kubernetes.io/job-name": "foreign", "job-name": "foreign",
              "batch.kubernetes.io/controller-uid": UID, "controller-uid": UID}
    earlier = {key: EARLIER if value == UID else value for key, value in labels.items()}
    pods = [("foreign-new-0", "node-e", labels, JOB), ("foreign-old-0", "node-z", earlier, None),
            ("gone-0", "node-y", {"job-name": "gone", "controller-uid": UID}, None)]
    await asyncio.to_thread(_run_pods, api, "Job", pods, job)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    placement = await asyncio.to_thread(engine.placement, "gpu/Job/foreign")
    assert placement.nodes == ["node-e"]
    with pytest.raises(JobUnreachable, match="none of its 0 pod"):  # its uid, yet no Job `gone` to read it from
        await asyncio.to_thread(engine.placement, "gpu/Job/gone")


@pytest.mark.parametrize("kind", list(PODS))
async def test_a_pod_is_the_jobs_only_where_its_controller_chain_leads_to_the_job(kmock, kind):
    """Red team 6 R5: a PyTorchJob's and an MPIJob's pods were matched by labels alone, so pods an earlier job of
    the same name left running (an orphan delete keeps the labels; the garbage collector drops the owner reference)
    were taken as the job's, and, for every kind, any pod labelled `gpuval.io/job=NAME`. Now a pod found is the
    job's only where its controller owner reference leads to the uid of the job read now: directly, or through the
    batch Job the MPIJob controls. Left out here: an orphan with the job's labels, a pod with gpuval's label alone,
    a pod still controlled by the earlier job (its uid), and a launcher under a Job the MPIJob does not control."""
    _declare(kmock)
    api = _api(kmock)
    own, _ = PODS[kind]
    job = await asyncio.to_thread(_job, api, kind, "foreign")
    earlier = {**job, "metadata": {**job["metadata"], "uid": EARLIER}}
    stray = [(f"stray-{name}", "node-z", labels, None) for name, _, labels, _ in own]  # orphans of an earlier job
    await asyncio.to_thread(_run_pods, api, kind, [*own, *stray, ("hand-made", "node-y", {LABEL: "foreign"}, None)],
                            job)
    await asyncio.to_thread(run_pod, api, "earlier-0", "node-x", own[-1][2], earlier)
    other_launcher = await asyncio.to_thread(created, api, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "foreign-launcher-old", "namespace": "gpu"}})
    await asyncio.to_thread(run_pod, api, "old-launcher", "node-w", own[0][2], other_launcher)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
    placement = await asyncio.to_thread(engine.placement, f"gpu/{kind}/foreign")
    assert placement.nodes == list(dict.fromkeys(node for _, node, _, _ in own))


async def test_a_probe_whose_container_floods_its_output_is_cut_at_the_bound(kmock):
    """Not concluded in the review: a container that prints without end made the operator's process hold the
    whole exec output (the client's reader keeps every frame and a copy of all output). Now the exec is read to
    EXEC_OUTPUT_BYTES, then closed: the node's answer says so, and what is kept is bounded."""
    _declare(kmock)
    own, _ = PODS["PyTorchJob"]
    flood = EXEC_OUTPUT_BYTES + (2 << 20)
    command = ["sh", "-c", f"head -c {flood} /dev/zero | tr '\\0' 'x'; echo done"]
    with ExecStandIn(str(kmock.url).rstrip("/"), run=lambda argv: command) as standin:
        api = client.ApiClient(client.Configuration(host=standin.url))
        await asyncio.to_thread(_run_pods, api, "PyTorchJob", own, await asyncio.to_thread(_job, api, "PyTorchJob",
                                                                                           "foreign"))
        engine = KubernetesEngine({"namespace": "gpu"}, api_client=api)
        [out] = await asyncio.to_thread(lambda: list(engine.probe_nodes("gpu/PyTorchJob/foreign", ["node-a"],
                                                                        ["jobs", "probe"], 60)))
    assert [e.pod for e in standin.execs] == ["foreign-master-0"]
    assert out.problem == (f"exec in pod foreign-master-0: more than {EXEC_OUTPUT_BYTES} bytes of output, which no "
                           "probe prints: cut there and the exec closed")
    assert sum(len(line) for line in out.lines) == EXEC_OUTPUT_BYTES
