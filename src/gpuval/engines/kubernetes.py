"""Kubernetes: an MPIJob (kubeflow.org/v2beta1, MPI Operator) for MPI workloads, a PyTorchJob (kubeflow.org/v1,
training operator) for torchrun ones, or a plain indexed Job (+ headless Service) where neither operator runs.

Pods ask for `nvidia.com/gpu` and the InfiniBand device plugin's resource (`rdma/ib`: one per GPU with the
SR-IOV plugin, or `rdma/shared_ib: 1`), add IPC_LOCK (pinned memory for RDMA), mount /dev/shm as a Memory
emptyDir and the NCCL topology file from a ConfigMap (Azure/aks-rdma-infiniband). Talks to the cluster with the
official client (kubeconfig, else in-cluster). Job ids are `NAMESPACE/KIND/NAME`.

With kind `auto`, `render` assumes the operator is there (a dry run shows the MPIJob/PyTorchJob); `submit` asks the
cluster's discovery API whether it serves that kind and sends the plain indexed Job where it does not.
"""

from __future__ import annotations

import re
import secrets
from pathlib import PurePosixPath
from typing import Any

import yaml
from pydantic import Field

from gpuval.engines import records
from gpuval.engines.base import Engine, EngineOptions, Rendered, unknown
from gpuval.engines.launch import mpirun_argv, process_argv, torchrun_argv
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher
from gpuval.errors import EngineError, MissingDependency, UsageError

LABEL = "gpuval.io/job"
KINDS = {  # kind -> (group, version, plural)
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "Job": ("batch", "v1", "jobs"),
}


class KubernetesOptions(EngineOptions):
    """Options of the Kubernetes engine (`--opt KEY=VALUE`, or JobSpec.extras["kubernetes"])."""

    namespace: str = Field("default", description="Namespace of the job.")
    kind: str = Field("auto", description="auto (MPIJob for mpi, PyTorchJob for torchrun, Job otherwise), "
                                          "MPIJob, PyTorchJob or Job (no operator needed).")
    context: str | None = Field(None, description="kubeconfig context [default: current, else in-cluster].")
    rdma_resource: str | None = Field(None, description="rdma/ib or rdma/shared_ib [default: rdma/ib when the "
                                                       "job has a SKU preset, else none].")
    rdma_count: int | None = Field(None, description="How many rdma devices per pod [default: one per GPU for "
                                                     "rdma/ib, 1 for rdma/shared_ib].")
    node_selector: dict[str, str] | None = Field(None, description="Pod nodeSelector [default: the SKU's "
                                                                  "node.kubernetes.io/instance-type].")
    tolerations: list[dict[str, Any]] | None = Field(None, description="Pod tolerations [default: tolerate "
                                                                      "nvidia.com/gpu taints when GPUs are asked].")
    topology_configmap: str = Field("nccl-topology", description="An existing ConfigMap holding the NCCL topology "
                                                                 "file (ignored with topology_source).")
    topology_source: str | None = Field(None, description="Local topology XML: gpuval creates the ConfigMap "
                                                          "`<job>-nccl-topology` from it and deletes it on cancel.")
    sshd_config: str | None = Field(None, description="sshd config file in the image, for MPIJob workers that run as "
                                                      "non-root (e.g. /home/mpiuser/.sshd_config) [default: none].")
    ssh_auth_mount_path: str | None = Field(None, description="MPIJob sshAuthMountPath, for images that run as "
                                                              "non-root (e.g. /home/mpiuser/.ssh) [default: /root/.ssh].")
    service_account: str | None = Field(None, description="Pod serviceAccountName.")


def _quantity(size: str) -> str:
    """Docker-style sizes (64g, 512m) as Kubernetes quantities (64Gi, 512Mi); others pass unchanged."""
    match = re.fullmatch(r"(\d+)([kmgt])b?", size.strip().lower())
    return f"{match.group(1)}{match.group(2).upper()}i" if match else size


def job_configmap(job: str) -> str:
    """The topology ConfigMap gpuval creates for a job (from topology_source): named after the job, so jobs
    never collide, and cancel knows what to delete."""
    return f"{job}-nccl-topology"


def topology_configmap(spec: JobSpec, options: KubernetesOptions) -> str:
    """The ConfigMap the pods mount: the job's own when gpuval creates it, else the user's existing one."""
    return job_configmap(spec.name) if options.topology_source else options.topology_configmap


def mpi_master_addr(name: str, namespace: str) -> str:
    """Stable DNS name of an MPIJob's worker 0, where mpirun puts rank 0 (the first hostfile entry).

    MPI Operator v2 names worker pods `{job}-worker-{i}`, sets their hostname to that and their subdomain to the
    job's headless Service, which is named after the job; its hostfile lists `{job}-worker-{i}.{job}.{ns}.svc`
    (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go: workerName, newWorker, newJobService,
    newConfigMap). Releases before v0.4 named the Service `{job}-worker`: set MASTER_ADDR with --env there.
    """
    return f"{name}-worker-0.{name}.{namespace}.svc"


def _kind(spec: JobSpec, options: KubernetesOptions) -> str:
    if options.kind == "auto":
        return {Launcher.MPI: "MPIJob", Launcher.TORCHRUN: "PyTorchJob"}.get(spec.launcher, "Job")
    if options.kind not in KINDS:
        raise UsageError(f"kubernetes kind {options.kind!r}: use auto, {', '.join(KINDS)}")
    return options.kind


def _container(spec: JobSpec, options: KubernetesOptions, name: str, command: list[str],
               worker: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name, "image": spec.image, "command": command,
        "env": [{"name": k, "value": v} for k, v in spec.full_env().items()],
    }
    if not worker:
        return container
    # Quantities as strings: the API takes int-or-string, the official client's typed models strings only.
    limits: dict[str, str] = {}
    if spec.gpus_per_node:
        limits["nvidia.com/gpu"] = str(spec.gpus_per_node)
    rdma = options.rdma_resource or ("rdma/ib" if spec.network else None)
    if rdma:
        limits[rdma] = str(options.rdma_count or (1 if rdma == "rdma/shared_ib" else max(spec.gpus_per_node, 1)))
    if limits:
        container["resources"] = {"limits": limits, "requests": dict(limits)}
    container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.network and spec.network.topology_file:
        mounts.append({"name": "nccl-topology", "mountPath": str(PurePosixPath(spec.network.topology_file).parent),
                       "readOnly": True})
    mounts += [{"name": f"mount-{i}", "mountPath": m.target, "readOnly": m.read_only} for i, m in enumerate(spec.mounts)]
    container["volumeMounts"] = mounts
    return container


def _pod_spec(spec: JobSpec, options: KubernetesOptions, container: dict[str, Any], worker: bool) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [container]}
    if options.service_account:
        pod["serviceAccountName"] = options.service_account
    if not worker:
        return pod
    shm: dict[str, Any] = {"medium": "Memory"}
    if spec.shm_size:
        shm["sizeLimit"] = _quantity(spec.shm_size)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    if spec.network and spec.network.topology_file:
        volumes.append({"name": "nccl-topology", "configMap": {"name": topology_configmap(spec, options)}})
    volumes += [{"name": f"mount-{i}", "hostPath": {"path": m.source}} for i, m in enumerate(spec.mounts)]
    pod["volumes"] = volumes
    selector = options.node_selector
    if selector is None and spec.network:
        selector = {"node.kubernetes.io/instance-type": spec.network.name}
    if selector:
        pod["nodeSelector"] = selector
    tolerations = options.tolerations
    if tolerations is None and spec.gpus_per_node:
        tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def _template(spec: JobSpec, options: KubernetesOptions, container_name: str, command: list[str], worker: bool,
              role: str) -> dict[str, Any]:
    container = _container(spec, options, container_name, command, worker)
    return {"metadata": {"labels": {LABEL: spec.name, "gpuval.io/role": role}},
            "spec": _pod_spec(spec, options, container, worker)}


def _mpijob(spec: JobSpec, options: KubernetesOptions, argv: list[str]) -> dict[str, Any]:
    """The launcher runs mpirun, which reaches the workers over ssh: workers run sshd in the foreground (what
    the operator's own examples run), and MASTER_ADDR (exported to every rank by mpirun -x) names worker 0."""
    if "MASTER_ADDR" not in spec.full_env():
        spec = spec.model_copy(update={"env": {**spec.env, "MASTER_ADDR": mpi_master_addr(spec.name,
                                                                                           options.namespace)}})
    launch = mpirun_argv(spec, argv, spec.world_size)
    launcher = _template(spec, options, "launcher", launch, worker=False, role="lead")
    sshd = ["/usr/sbin/sshd", "-De", *(["-f", options.sshd_config] if options.sshd_config else [])]
    worker = _template(spec, options, "worker", sshd, worker=True, role="worker")
    job_spec: dict[str, Any] = {
        "slotsPerWorker": spec.procs_per_node, "runPolicy": {"cleanPodPolicy": "Running"},
        "mpiImplementation": "OpenMPI",
        "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                            "Worker": {"replicas": spec.nodes, "restartPolicy": "Never", "template": worker}}}
    if options.ssh_auth_mount_path:
        job_spec["sshAuthMountPath"] = options.ssh_auth_mount_path
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": spec.name, "namespace": options.namespace, "labels": {LABEL: spec.name}},
            "spec": job_spec}


def _pytorchjob(spec: JobSpec, options: KubernetesOptions, argv: list[str]) -> dict[str, Any]:
    # The operator sets PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR/PORT: torchrun reads them as its defaults.
    command = torchrun_argv(spec, argv, [])
    replicas: dict[str, Any] = {
        "Master": {"replicas": 1, "restartPolicy": "Never",
                   "template": _template(spec, options, "pytorch", command, worker=True, role="lead")},
    }
    if spec.nodes > 1:
        replicas["Worker"] = {"replicas": spec.nodes - 1, "restartPolicy": "Never",
                              "template": _template(spec, options, "pytorch", command, worker=True, role="worker")}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": spec.name, "namespace": options.namespace, "labels": {LABEL: spec.name}},
            "spec": {"nprocPerNode": str(spec.procs_per_node), "runPolicy": {"cleanPodPolicy": "None"},
                     "pytorchReplicaSpecs": replicas}}


def _indexed_job(spec: JobSpec, options: KubernetesOptions, argv: list[str]) -> list[dict[str, Any]]:
    """A Job with one pod per node (pod i is node i) and the headless Service that names them."""
    if spec.launcher is Launcher.TORCHRUN:
        # $(VAR) is expanded by the kubelet from the container's env, no shell involved.
        argv = torchrun_argv(spec, argv, [f"--nnodes={spec.nodes}", "--node-rank=$(JOB_COMPLETION_INDEX)",
                                          f"--master-addr={spec.name}-0.{spec.name}", "--master-port=29500"])
    elif spec.launcher is Launcher.MPI and spec.nodes * spec.procs_per_node > 1:
        raise UsageError("an MPI workload on Kubernetes needs the MPI Operator (kind MPIJob), or --launcher torchrun")
    template = _template(spec, options, "main", argv, worker=True, role="worker")
    template["spec"].update({"subdomain": spec.name, "restartPolicy": "Never"})
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": spec.name, "namespace": options.namespace, "labels": {LABEL: spec.name}},
           "spec": {"completionMode": "Indexed", "completions": spec.nodes, "parallelism": spec.nodes,
                    "backoffLimit": 0, "template": template}}
    if spec.time_limit_min:
        job["spec"]["activeDeadlineSeconds"] = spec.time_limit_min * 60
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": spec.name, "namespace": options.namespace, "labels": {LABEL: spec.name}},
               "spec": {"clusterIP": "None", "selector": {LABEL: spec.name}}}
    return [service, job]


def manifests(spec: JobSpec, options: KubernetesOptions) -> list[dict[str, Any]]:
    """Every object of the job, in creation order (pure)."""
    if not spec.image:
        raise UsageError("Kubernetes runs containers: give --image (one with gpuval, or nccl-tests for --use nccl-tests)")
    argv = process_argv(spec, None)
    kind = _kind(spec, options)
    objects: list[dict[str, Any]] = []
    if options.topology_source and spec.network and spec.network.topology_file:
        with open(options.topology_source) as fh:
            data = {PurePosixPath(spec.network.topology_file).name: fh.read()}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": topology_configmap(spec, options), "namespace": options.namespace,
                                     "labels": {LABEL: spec.name}},
                        "data": data})
    if kind == "MPIJob":
        objects.append(_mpijob(spec, options, argv))
    elif kind == "PyTorchJob":
        objects.append(_pytorchjob(spec, options, argv))
    else:
        objects += _indexed_job(spec, options, argv)
    return objects


def _file_name(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def _conditions_state(conditions: list[dict[str, Any]]) -> tuple[JobState, str]:
    """Kubeflow (Created/Running/Succeeded/Failed) and batch Job (Complete/Failed) conditions, newest true wins."""
    true = [c for c in conditions if str(c.get("status")) == "True"]
    for ctype, state in (("Succeeded", JobState.SUCCEEDED), ("Complete", JobState.SUCCEEDED),
                         ("Failed", JobState.FAILED), ("Suspended", JobState.CANCELLED),
                         ("Running", JobState.RUNNING), ("Restarting", JobState.RUNNING),
                         ("Created", JobState.PENDING)):
        if any(c.get("type") == ctype for c in true):
            return state, ctype
    return JobState.PENDING, "no condition yet"


class KubernetesEngine(Engine[KubernetesOptions]):
    """Runs the job on a Kubernetes cluster."""

    name = "kubernetes"
    Options = KubernetesOptions

    def __init__(self, options: dict[str, Any] | None = None, api_client: Any = None) -> None:
        super().__init__(options)
        self._api_client = api_client

    def render(self, spec: JobSpec) -> Rendered:
        """One YAML file per object."""
        objects = manifests(spec, self.options_for(spec))
        files = {_file_name(o): yaml.safe_dump(o, sort_keys=False) for o in objects}
        return Rendered(self.name, files, objects)

    def _client(self) -> Any:
        if self._api_client is not None:
            return self._api_client
        try:
            from kubernetes import client, config
        except ImportError:
            raise MissingDependency("the kubernetes client is not installed: pip install 'gpuval[engines]'") from None
        try:
            config.load_kube_config(context=self.options.context)
        except Exception:  # no kubeconfig: try the pod's service account
            try:
                config.load_incluster_config()
            except Exception:
                raise EngineError("no kubeconfig (~/.kube/config, KUBECONFIG) and not inside a cluster") from None
        self._api_client = client.ApiClient()
        return self._api_client

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return func(*args, **kwargs)
        except ApiException as exc:
            raise EngineError(f"kubernetes {what}: {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 connection errors: keep their first line
            raise EngineError(f"kubernetes {what}: {str(exc).splitlines()[0]}") from None

    def _create(self, obj: dict[str, Any]) -> None:
        from kubernetes import client

        api = self._client()
        kind, ns = obj["kind"], obj["metadata"]["namespace"]
        what = f"create {kind} {obj['metadata']['name']}"
        if kind in ("MPIJob", "PyTorchJob"):
            group, version, plural = KINDS[kind]
            self._call(what, client.CustomObjectsApi(api).create_namespaced_custom_object, group, version, ns,
                       plural, obj)
        elif kind == "Job":
            self._call(what, client.BatchV1Api(api).create_namespaced_job, ns, obj)
        elif kind == "Service":
            self._call(what, client.CoreV1Api(api).create_namespaced_service, ns, obj)
        else:
            self._call(what, client.CoreV1Api(api).create_namespaced_config_map, ns, obj)

    def _serves(self, kind: str) -> bool:
        """Whether the cluster serves a Kubeflow kind: its group/version in the discovery API (readable by every
        user, unlike the CRD objects) lists its plural. A 404 is an operator that is not installed."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        group, version, plural = KINDS[kind]
        try:
            found = client.CustomObjectsApi(self._client()).get_api_resources(group, version)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise EngineError(f"kubernetes discovery of {group}/{version}: {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 connection errors: keep their first line
            raise EngineError(f"kubernetes discovery of {group}/{version}: {str(exc).splitlines()[0]}") from None
        return any(r.name == plural for r in found.resources or [])

    def submit(self, spec: JobSpec) -> str:
        """Create the objects; the job gets a random suffix so resubmitting never collides. With kind auto, the
        plain indexed Job replaces an MPIJob/PyTorchJob whose operator the cluster lacks."""
        spec = spec.model_copy(update={"name": f"{spec.name[:45]}-{secrets.token_hex(3)}"})
        options = self.options_for(spec)
        if options.kind == "auto" and _kind(spec, options) != "Job" and not self._serves(_kind(spec, options)):
            options = options.model_copy(update={"kind": "Job"})
        objects = manifests(spec, options)
        for obj in objects:
            self._create(obj)
        main = objects[-1]
        job_id = f"{main['metadata']['namespace']}/{main['kind']}/{main['metadata']['name']}"
        records.save(records.JobRecord(engine=self.name, job_id=job_id, spec=spec,
                                       run_id=spec.env.get("GPUVAL_RUN_ID", "")))
        return job_id

    def _parse_id(self, job_id: str) -> tuple[str, str, str]:
        parts = job_id.split("/")
        if len(parts) != 3 or parts[1] not in KINDS:
            raise UsageError(f"kubernetes job id {job_id!r}: expected NAMESPACE/KIND/NAME (KIND: {', '.join(KINDS)})")
        return parts[0], parts[1], parts[2]

    def _get(self, job_id: str) -> dict[str, Any] | None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ns, kind, name = self._parse_id(job_id)
        api = self._client()
        try:
            if kind == "Job":
                return api.sanitize_for_serialization(client.BatchV1Api(api).read_namespaced_job(name, ns))
            group, version, plural = KINDS[kind]
            return client.CustomObjectsApi(api).get_namespaced_custom_object(group, version, ns, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise EngineError(f"kubernetes get {kind} {name}: {exc.status} {exc.reason}") from None

    def status(self, job_id: str) -> JobStatus:
        """From the object's status conditions; a deleted object is cancelled if gpuval cancelled it."""
        obj = self._get(job_id)
        if obj is None:
            record = records.load(self.name, job_id)
            if record is not None and record.cancelled:
                return JobStatus(job_id=job_id, engine=self.name, state=JobState.CANCELLED,
                                 native_state="deleted", source="gpuval job record")
            return unknown(self.name, job_id, "no such object (deleted, or never created)")
        conditions = (obj.get("status") or {}).get("conditions") or []
        state, native = _conditions_state(conditions)
        return JobStatus(job_id=job_id, engine=self.name, state=state, native_state=native,
                         source=f"{obj.get('kind', 'object')} status")

    def logs(self, job_id: str) -> str:
        """Every pod's log, the lead pod (MPI launcher, PyTorch master, index 0) first."""
        from kubernetes import client

        ns, _, name = self._parse_id(job_id)
        core = client.CoreV1Api(self._client())
        pods = self._call("list pods", core.list_namespaced_pod, ns, label_selector=f"{LABEL}={name}").items
        pods.sort(key=lambda p: ((p.metadata.labels or {}).get("gpuval.io/role") != "lead", p.metadata.name))
        parts = []
        for pod in pods:
            text = self._call(f"logs of {pod.metadata.name}", core.read_namespaced_pod_log, pod.metadata.name, ns)
            parts.append(text if len(pods) == 1 else f"==> pod {pod.metadata.name} <==\n{text}")
        return "\n".join(parts)

    def _delete_config_map(self, name: str, ns: str) -> None:
        """Delete a ConfigMap; one that is not there (never created, already gone) is fine."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            client.CoreV1Api(self._client()).delete_namespaced_config_map(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                raise EngineError(f"kubernetes delete ConfigMap {name}: {exc.status} {exc.reason}") from None

    def cancel(self, job_id: str) -> None:
        """Delete the job (its pods go with it) and the topology ConfigMap gpuval made for it, and remember that
        it was cancelled."""
        from kubernetes import client

        ns, kind, name = self._parse_id(job_id)
        api = self._client()
        body = client.V1DeleteOptions(propagation_policy="Background")
        if kind == "Job":
            self._call(f"delete Job {name}", client.BatchV1Api(api).delete_namespaced_job, name, ns, body=body)
            self._call(f"delete Service {name}", client.CoreV1Api(api).delete_namespaced_service, name, ns)
        else:
            group, version, plural = KINDS[kind]
            self._call(f"delete {kind} {name}", client.CustomObjectsApi(api).delete_namespaced_custom_object,
                       group, version, ns, plural, name, body=body)
        self._delete_config_map(job_configmap(name), ns)
        records.mark_cancelled(self.name, job_id)

