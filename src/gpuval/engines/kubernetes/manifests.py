"""Kubernetes manifests of a JobSpec (pure): an MPIJob (kubeflow.org/v2beta1, MPI Operator) for MPI workloads, a
PyTorchJob (kubeflow.org/v1, training operator) for torchrun ones, or a plain indexed Job (+ headless Service)
where neither operator runs.

Pods ask for `nvidia.com/gpu` and the InfiniBand device plugin's resource (`rdma/ib`: one per GPU with the
SR-IOV plugin, or `rdma/shared_ib: 1`), add IPC_LOCK (pinned memory for RDMA), mount /dev/shm as a Memory
emptyDir and the NCCL topology file from a ConfigMap (Azure/aks-rdma-infiniband). Without --image the pods run
gpuval's own image (launch.default_image).

The kubelet expands `$(VAR)` in a container's command, args and env values; `$$` is its escape for `$`. Every
value the user gave (environment, workload arguments) has each `$` doubled, so it reaches the process as typed;
only gpuval's own `$(JOB_COMPLETION_INDEX)` is expanded. Options that become object names are checked as the API
server checks them (RFC 1123), so a bad one is a one-line error before anything is sent.

An environment variable that holds a secret (results.dsn.holds_secret, the dry run's one rule: a secret-named
variable such as *PASSWORD*, *_PWD, *TOKEN, *KEY, or a value with a URL password or a known token in it) is not
written into the pod spec, which anyone who may read pods can read: the job gets a Secret of its own (`{job}-env`)
holding the whole value, and each pod reads it from there (`valueFrom.secretKeyRef`). The job's own
objects (that Secret, its topology ConfigMap, the indexed Job's Service, its ComputeDomain) carry its label
and, once the job exists, an owner reference to it (engines/kubernetes/owned.py).

A multi-node NVLink job (GB200/GB300 NVL72) gets a ComputeDomain of its own (`{job}-compute-domain`, created first)
and each of its GPU pods a claim on the domain's IMEX channel (engines/kubernetes/domain.py): with `compute_domain`
true, or auto where the spec says its nodes are such trays and it spans more than one node.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, field_validator

from gpuval.collectives.sizes import format_size
from gpuval.engines.base import EngineOptions
from gpuval.engines.kubernetes import domain
from gpuval.engines.launch import default_image, mpirun_argv, process_argv, torchrun_argv
from gpuval.engines.nodes import NODE_NAME_VARIABLE, node_name_env
from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results.dsn import holds_secret

LABEL = "gpuval.io/job"
KINDS = {  # kind -> (group, version, plural)
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "Job": ("batch", "v1", "jobs"),
}
RESOURCES = {**KINDS, "ComputeDomain": (domain.GROUP, domain.VERSION, domain.PLURAL)}  # every kind gpuval makes
_LABEL_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(rf"^((?=[^/]{{1,253}}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        rf"{_LABEL_PART}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_PART})?$")


class KubernetesOptions(EngineOptions):
    """Options of the Kubernetes engine (`--opt KEY=VALUE`, or JobSpec.extras["kubernetes"])."""

    namespace: str = Field("default", description="Namespace of the job.")
    kind: Literal["auto", "MPIJob", "PyTorchJob", "Job"] = Field(
        "auto", description="auto (MPIJob for mpi, PyTorchJob for torchrun, Job otherwise; the plain Job where the "
                            "cluster lacks the operator), MPIJob, PyTorchJob or Job (no operator needed).")
    context: str | None = Field(None, description="kubeconfig context [default: current, else in-cluster].")
    rdma_resource: str | None = Field(None, description="rdma/ib or rdma/shared_ib [default: rdma/ib when the "
                                                       "job has a SKU preset, else none].")
    rdma_count: int | None = Field(None, ge=1, description="How many rdma devices per pod [default: one per GPU "
                                                           "for rdma/ib, 1 for rdma/shared_ib].")
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
    nodes: list[str] | None = Field(None, description="Run the pods on exactly these nodes, one pod per node (node "
                                                      "affinity on the node names, anti-affinity between the job's "
                                                      "pods). What `gpuval fleet` pins each test with.")
    fail_alone: bool = Field(False, description="Indexed Job: each pod fails alone (backoffLimitPerIndex 0, "
                                                "Kubernetes 1.29+), the others run to their end, where one failed "
                                                "pod ends them all otherwise. `gpuval fleet`'s node tests use it.")
    compute_domain: Literal["auto"] | bool = Field(
        "auto", description="A ComputeDomain for a multi-node NVLink job (GB200/GB300 NVL72; NVIDIA's DRA driver): "
                            "gpuval creates it before the job (numNodes: the job's nodes), each GPU pod claims its "
                            "IMEX channel, cancel deletes it [default auto: where the SKU's baseline or the "
                            "--profile says the nodes are multi-node NVLink trays and the job spans more than one "
                            "node, and the cluster serves ComputeDomains].")

    @field_validator("compute_domain", mode="before")
    @classmethod
    def _auto_or_bool(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "auto":
            return value
        word = str(value).lower()
        if word in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return word in ("true", "yes", "on", "1")
        raise ValueError(f"{value!r}: give auto, true or false")

    @field_validator("namespace")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a namespace name (RFC 1123 label: up to 63 lower-case letters, "
                             "digits and -, starting and ending with a letter or digit)")
        return value

    @field_validator("service_account", "topology_configmap")
    @classmethod
    def _subdomain(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} is not an object name (RFC 1123 subdomain: lower-case letters, digits, "
                             "- and ., up to 253)")
        return value

    @field_validator("rdma_resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        if value is not None and ("/" not in value or not _QUALIFIED.match(value)):
            raise ValueError(f"{value!r} is not an extended resource name (DOMAIN/NAME, e.g. rdma/ib)")
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, item in (value or {}).items():
            if not _QUALIFIED.match(key) or not _LABEL_VALUE.match(str(item)):
                raise ValueError(f"node selector {key}={item}: not a label key and value")
        return value

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not _DNS_SUBDOMAIN.match(name):
                raise ValueError(f"{name!r} is not a node name (RFC 1123 subdomain)")
        return value

    @field_validator("sshd_config", "ssh_auth_mount_path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r}: give an absolute path inside the image")
        return value


def escape(value: str) -> str:
    """A value the kubelet passes through unchanged: it turns `$$` into `$` and expands `$(VAR)`."""
    return value.replace("$", "$$")


def quantity(nbytes: int) -> str:
    """Bytes as a Kubernetes quantity in binary units (64 GiB -> 64Gi), exact; plain bytes when no unit fits."""
    text = format_size(nbytes)
    return f"{text}i" if text[-1] in "KMGT" else text


def job_configmap(job: str) -> str:
    """The topology ConfigMap gpuval creates for a job (from topology_source): named after the job, so jobs
    never collide, and cancel knows what to delete."""
    return f"{job}-nccl-topology"


def job_secret(job: str) -> str:
    """The Secret gpuval creates for a job's secret environment values: named after the job, as its ConfigMap."""
    return f"{job}-env"


def topology_configmap(name: str, options: KubernetesOptions) -> str:
    """The ConfigMap the pods mount: the job's own when gpuval creates it, else the user's existing one."""
    return job_configmap(name) if options.topology_source else options.topology_configmap


def mpi_master_addr(name: str, namespace: str) -> str:
    """Stable DNS name of an MPIJob's worker 0, where mpirun puts rank 0 (the first hostfile entry).

    MPI Operator v2 names worker pods `{job}-worker-{i}`, sets their hostname to that and their subdomain to the
    job's headless Service, which is named after the job; its hostfile lists `{job}-worker-{i}.{job}.{ns}.svc`
    (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go: workerName, newWorker, newJobService,
    newConfigMap). Releases before v0.4 named the Service `{job}-worker`: set MASTER_ADDR with --env there.
    """
    return f"{name}-worker-0.{name}.{namespace}.svc"


def wants_domain(spec: JobSpec, options: KubernetesOptions) -> bool:
    """Whether the job gets a ComputeDomain: the option's word, or for auto the spec's multi-node NVLink trays on
    more than one node."""
    if options.compute_domain == "auto":
        return spec.multi_node_nvlink and spec.nodes > 1
    return bool(options.compute_domain)


def kind_of(spec: JobSpec, options: KubernetesOptions) -> str:
    """The kind to send: the option's, or for auto the operator's kind of the job's launcher."""
    if options.kind == "auto":
        return {Launcher.MPI: "MPIJob", Launcher.TORCHRUN: "PyTorchJob"}.get(spec.launcher, "Job")
    return options.kind


class _Job:
    """One job's manifests: the spec (with its image), the options and the job's unique name."""

    def __init__(self, spec: JobSpec, options: KubernetesOptions, name: str) -> None:
        self.spec, self.options, self.name = spec, options, name
        self.domain = wants_domain(spec, options)
        # The environment values that hold a secret, by name: in the job's Secret, never in the pod spec.
        self.hidden = {k: v for k, v in spec.full_env().items() if k != NODE_NAME_VARIABLE and holds_secret(k, v)}

    def meta(self, name: str | None = None) -> dict[str, Any]:
        """Object metadata (a new dict each time: a shared one would dump as a YAML anchor)."""
        return {"name": name or self.name, "namespace": self.options.namespace, "labels": {LABEL: self.name}}

    def container(self, cname: str, command: list[str], worker: bool) -> dict[str, Any]:
        spec, options = self.spec, self.options
        # Every gpuval pod knows its node's name (engines.nodes.this_node) from the scheduler, never from --env:
        # its own host name is the pod's.
        env = [{"name": k, "valueFrom": {"secretKeyRef": {"name": job_secret(self.name), "key": k}}} if k in self.hidden
               else {"name": k, "value": escape(v)} for k, v in spec.full_env().items() if k != NODE_NAME_VARIABLE]
        env.append(node_name_env())
        container: dict[str, Any] = {"name": cname, "image": spec.image, "command": command, "env": env}
        if not worker:
            return container
        # Quantities as strings: the API takes int-or-string, the official client's typed models strings only.
        limits: dict[str, str] = {}
        if spec.gpus_per_node:
            limits["nvidia.com/gpu"] = str(spec.gpus_per_node)
        rdma = options.rdma_resource or ("rdma/ib" if spec.network else None)
        if rdma:
            limits[rdma] = str(options.rdma_count or (1 if rdma == "rdma/shared_ib" else max(spec.gpus_per_node, 1)))
        resources: dict[str, Any] = {"limits": limits, "requests": dict(limits)} if limits else {}
        if self.domain:
            resources["claims"] = domain.container_claims()
        if resources:
            container["resources"] = resources
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
        mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
        if spec.network and spec.network.topology_file:
            mounts.append({"name": "nccl-topology", "mountPath": str(PurePosixPath(spec.network.topology_file).parent),
                           "readOnly": True})
        mounts += [{"name": f"mount-{i}", "mountPath": m.target, "readOnly": m.read_only}
                   for i, m in enumerate(spec.mounts)]
        container["volumeMounts"] = mounts
        return container

    def pod(self, container: dict[str, Any], worker: bool) -> dict[str, Any]:
        spec, options = self.spec, self.options
        pod: dict[str, Any] = {"containers": [container]}
        if options.service_account:
            pod["serviceAccountName"] = options.service_account
        if not worker:
            return pod
        shm: dict[str, Any] = {"medium": "Memory"}
        if spec.shm_bytes:
            shm["sizeLimit"] = quantity(spec.shm_bytes)
        volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
        if spec.network and spec.network.topology_file:
            volumes.append({"name": "nccl-topology", "configMap": {"name": topology_configmap(self.name, options)}})
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
        if options.nodes:
            pod["affinity"] = self.pinned(options.nodes)
        if self.domain:
            pod["resourceClaims"] = domain.pod_claims(self.name)
        return pod

    def pinned(self, nodes: list[str]) -> dict[str, Any]:
        """Only the named nodes (matchFields on metadata.name: the node's name, whatever its labels; one term per
        node, the terms ORed: the API server takes one value per node field selector), and never two pods of this
        job on one node."""
        return {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in nodes]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {LABEL: self.name}}, "topologyKey": "kubernetes.io/hostname"}]},
        }

    def template(self, cname: str, command: list[str], worker: bool, role: str) -> dict[str, Any]:
        container = self.container(cname, command, worker)
        return {"metadata": {"labels": {LABEL: self.name, "gpuval.io/role": role}}, "spec": self.pod(container, worker)}

    def mpijob(self, argv: list[str]) -> dict[str, Any]:
        """The launcher runs mpirun, which reaches the workers over ssh: workers run sshd in the foreground (what
        the operator's own examples run), and MASTER_ADDR (exported to every rank by mpirun -x) names worker 0."""
        spec, options = self.spec, self.options
        launch = mpirun_argv(spec, argv, spec.world_size)
        sshd = ["/usr/sbin/sshd", "-De", *(["-f", options.sshd_config] if options.sshd_config else [])]
        job_spec: dict[str, Any] = {
            "slotsPerWorker": spec.procs_per_node, "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never",
                             "template": self.template("launcher", launch, False, "lead")},
                "Worker": {"replicas": spec.nodes, "restartPolicy": "Never",
                           "template": self.template("worker", sshd, True, "worker")}}}
        if options.ssh_auth_mount_path:
            job_spec["sshAuthMountPath"] = options.ssh_auth_mount_path
        return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": self.meta(), "spec": job_spec}

    def pytorchjob(self, argv: list[str]) -> dict[str, Any]:
        # The operator sets PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR/PORT: torchrun reads them as its defaults.
        command = torchrun_argv(self.spec, argv, [])
        replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "Never",
                                               "template": self.template("pytorch", command, True, "lead")}}
        if self.spec.nodes > 1:
            replicas["Worker"] = {"replicas": self.spec.nodes - 1, "restartPolicy": "Never",
                                  "template": self.template("pytorch", command, True, "worker")}
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": self.meta(),
                "spec": {"nprocPerNode": str(self.spec.procs_per_node), "runPolicy": {"cleanPodPolicy": "None"},
                         "pytorchReplicaSpecs": replicas}}

    def indexed_job(self, argv: list[str]) -> list[dict[str, Any]]:
        """A Job with one pod per node (pod i is node i) and the headless Service that names them."""
        spec, name = self.spec, self.name
        if spec.launcher is Launcher.TORCHRUN:
            # $(VAR) is expanded by the kubelet from the container's env, no shell involved.
            argv = torchrun_argv(spec, argv, [f"--nnodes={spec.nodes}", "--node-rank=$(JOB_COMPLETION_INDEX)",
                                              f"--master-addr={name}-0.{name}", "--master-port=29500"])
        elif spec.launcher is Launcher.MPI and spec.world_size > 1:
            raise UsageError("an MPI workload on Kubernetes needs the MPI Operator (kind MPIJob), "
                             "or --launcher torchrun")
        template = self.template("main", argv, True, "worker")
        template["spec"].update({"subdomain": name, "restartPolicy": "Never"})
        # backoffLimit 0: the first failed pod fails the Job, and the Job's other pods are ended with it;
        # backoffLimitPerIndex 0: a failed pod fails its own index only.
        limit = {"backoffLimitPerIndex": 0} if self.options.fail_alone else {"backoffLimit": 0}
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": self.meta(),
               "spec": {"completionMode": "Indexed", "completions": spec.nodes, "parallelism": spec.nodes,
                        **limit, "template": template}}
        if spec.time_limit_min:
            job["spec"]["activeDeadlineSeconds"] = spec.time_limit_min * 60
        service = {"apiVersion": "v1", "kind": "Service", "metadata": self.meta(),
                   "spec": {"clusterIP": "None", "selector": {LABEL: name}}}
        return [service, job]

    def secret(self) -> list[dict[str, Any]]:
        """The job's own Secret of its secret environment values (a Secret's data is not expanded by the kubelet:
        the values go as typed); none where no value holds a secret."""
        if not self.hidden:
            return []
        return [{"apiVersion": "v1", "kind": "Secret", "metadata": self.meta(job_secret(self.name)), "type": "Opaque",
                 "stringData": self.hidden}]

    def compute_domain(self) -> list[dict[str, Any]]:
        """The job's own ComputeDomain, where it gets one."""
        if not self.domain:
            return []
        return [domain.compute_domain(self.meta(domain.domain_name(self.name)), self.name, self.spec.nodes)]

    def topology(self) -> list[dict[str, Any]]:
        """The job's own topology ConfigMap, from topology_source (read here: the dry run shows its content)."""
        spec, options = self.spec, self.options
        if not (options.topology_source and spec.network and spec.network.topology_file):
            return []
        try:
            with open(options.topology_source) as fh:
                data = {PurePosixPath(spec.network.topology_file).name: fh.read()}
        except OSError as exc:
            raise UsageError(f"topology_source {options.topology_source}: {exc.strerror}") from None
        meta = self.meta(topology_configmap(self.name, options))
        return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}]


def manifests(spec: JobSpec, options: KubernetesOptions, name: str) -> list[dict[str, Any]]:
    """Every object of the job named `name`, in creation order (pure). Without an image, gpuval's own."""
    if not spec.image:
        spec = spec.model_copy(update={"image": default_image()})
    kind = kind_of(spec, options)
    if kind == "MPIJob" and "MASTER_ADDR" not in spec.full_env():
        spec = spec.model_copy(update={"env": {**spec.env, "MASTER_ADDR": mpi_master_addr(name, options.namespace)}})
    job = _Job(spec, options, name)
    argv = [escape(word) for word in process_argv(spec, None)]
    # what the pods claim, mount and read, before the pods: the ComputeDomain first, whose controller must make the
    # claim template the pods name
    first = [*job.compute_domain(), *job.topology(), *job.secret()]
    if kind == "MPIJob":
        return [*first, job.mpijob(argv)]
    if kind == "PyTorchJob":
        return [*first, job.pytorchjob(argv)]
    return [*first, *job.indexed_job(argv)]
