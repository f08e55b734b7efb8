"""Kubernetes: the manifests of manifests.py, sent with the one client of client.py (kubeconfig, else
in-cluster, never the library's global configuration). Job ids are `NAMESPACE/KIND/NAME`, NAME being the spec's
name and a hash of the spec (render).

With kind `auto` the operator's kind (MPIJob, PyTorchJob) goes only where the cluster serves it: `discover` asks
the discovery API, for the dry run and the submit alike, and the plain indexed Job goes where it does not. A dry run
that can reach no cluster shows the operator's kind and says so in a note. Every API call goes through
`client.call`: an API error or an unreachable server is one line (EngineError, exit 2). The job's own objects are
sent, owned and cancelled by owned.py (gpuval deletes only what carries its label); any job's pods are found by
pods.py (gpuval's label, the operators', the Job controller's). Pod logs are fetched 16 at a time and handed on in
pod order. Tested with the official client against kmock (tests/engines/test_kubernetes*.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import yaml

from gpuval.engines.base import Engine, Facts, JobUnreachable, Rendered, unique_name, unknown
from gpuval.engines.exclude import Exclusion
from gpuval.engines.kubernetes import owned
from gpuval.engines.kubernetes.client import api_client, call, create, read
from gpuval.engines.kubernetes.exclude import render_exclude, send_exclude
from gpuval.engines.kubernetes.manifests import (
    KINDS, LABEL, RESOURCES, KubernetesOptions, kind_of, manifests, mpi_master_addr, wants_domain,
)
from gpuval.engines.kubernetes.nodes import KubernetesNodes
from gpuval.engines.kubernetes.pods import EXEC_OUTPUT_BYTES, job_pods, read_exec
from gpuval.engines.kubernetes.site import KubernetesSite
from gpuval.engines.launch import default_image
from gpuval.engines.output import ordered_map, text_lines
from gpuval.engines.probe import Placement, ProbeCall, ProbeOutput, answered
from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EngineError, GpuvalError, UsageError

__all__ = ["KINDS", "LABEL", "KubernetesEngine", "KubernetesOptions", "mpi_master_addr", "pod_log_lines"]

LOG_FETCHES = 16  # pod logs read at once: enough to hide round trips, few enough for the API server's limits
DISCOVERY_TIMEOUT_S = 10  # connect/read limit of the discovery call, so a dry run never hangs on a dead server


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


def pod_log_lines(read: Callable[[str], str], pods: list[str], width: int = LOG_FETCHES) -> Iterator[str]:
    """Every pod's log, line by line in the order of `pods` (under a `==> pod NAME <==` line when there are
    several), with `width` reads in flight: a 4,096-pod job costs 4,096 / width round trips, not 4,096."""
    many = len(pods) > 1
    for pod, text in ordered_map(lambda name: (name, read(name)), pods, width):
        if many:
            yield f"==> pod {pod} <==\n"
        for line in text_lines(text):
            yield line if line.endswith("\n") else line + "\n"  # a log may end without one


class KubernetesEngine(Engine[KubernetesOptions]):
    """Runs the job on a Kubernetes cluster."""

    name = "kubernetes"
    Options = KubernetesOptions
    NODE_VARIABLES = ("KUBERNETES_SERVICE_HOST",)  # in every pod

    def __init__(self, options: dict[str, Any] | None = None, api_client: Any = None) -> None:
        super().__init__(options)
        self._api_client = api_client

    def site(self, sku: str | None = None, switch_label: str | None = None,
             rack_label: str | None = None) -> KubernetesSite:
        return KubernetesSite(self, self.client, sku, switch_label, rack_label)

    def node_client(self) -> KubernetesNodes:
        return KubernetesNodes(self.client)  # the cluster this engine's jobs run on, asked when a node is edited

    def discover(self, spec: JobSpec, strict: bool) -> Facts:
        """What render needs from the cluster: with kind auto, whether it serves the operator's kind; for a job that
        gets a ComputeDomain, whether it serves ComputeDomains (NVIDIA's DRA driver)."""
        options = self.options_for(spec)
        kind, domain = self._kind_facts(spec, options, strict), self._domain_facts(spec, options, strict)
        return Facts({**kind.options, **domain.options}, kind.notes + domain.notes)

    def _kind_facts(self, spec: JobSpec, options: KubernetesOptions, strict: bool) -> Facts:
        wanted = kind_of(spec, options)
        if options.kind != "auto" or wanted == "Job":
            return Facts()
        try:
            served = self._serves(wanted)
        except GpuvalError as exc:
            if strict:
                raise
            return Facts(notes=[f"kind auto: could not ask a cluster whether it serves {wanted} ({exc}); the dry "
                                f"run shows the {wanted}, and submit sends the indexed Job where the operator is "
                                "missing"])
        return Facts({"kind": wanted if served else "Job"})

    def _domain_facts(self, spec: JobSpec, options: KubernetesOptions, strict: bool) -> Facts:
        """A ComputeDomain goes only where the cluster serves the kind: auto sends none where it does not (the job
        runs as any other); compute_domain=true refuses to send the job (a one-line error, nothing sent)."""
        if not wants_domain(spec, options):
            return Facts()
        try:
            served = self._serves("ComputeDomain")
        except GpuvalError as exc:
            if strict:
                raise
            return Facts(notes=[f"compute_domain: could not ask a cluster whether it serves ComputeDomains ({exc}); "
                                "the dry run shows one, and submit sends the job without it (auto) or refuses it "
                                "(true) where the cluster serves none"])
        if served:
            return Facts()
        if options.compute_domain == "auto":
            return Facts({"compute_domain": False}, [
                "compute_domain auto: the cluster serves no ComputeDomain (NVIDIA's DRA driver for GPUs is not "
                "installed): the job gets none"])
        why = ("the cluster serves no ComputeDomain (resource.nvidia.com/v1beta1): install NVIDIA's DRA driver for "
               "GPUs with ComputeDomains, or send the job with --opt compute_domain=false")
        if strict:
            raise EngineError(f"kubernetes compute_domain=true: {why}")
        return Facts(notes=[f"compute_domain=true: {why}; submit would refuse"])

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        """One YAML file per object, named by kind and the spec's name; the objects carry the job's unique name."""
        if not spec.image:
            spec = spec.model_copy(update={"image": default_image()})
        name = unique_name(spec, self.options_for(spec))  # before discovery: the kind does not change the name
        objects = manifests(spec, self.options_for(spec, facts), name)
        files = {f"{o['kind'].lower()}-{spec.name}.yaml": yaml.safe_dump(o, sort_keys=False) for o in objects}
        return Rendered(self.name, files, spec, objects, job_name=name)

    def client(self) -> Any:
        """The ApiClient this engine talks through (the one it was given, else kubeconfig, else in-cluster): the
        fleet check lists and taints nodes with it, so a check and its jobs see one cluster."""
        return self._client()

    def _client(self) -> Any:
        if self._api_client is None:
            self._api_client = api_client(self.options.context, pool_size=LOG_FETCHES)
        return self._api_client

    def cluster_name(self) -> str:
        """The API server this engine talks to (the kubeconfig context's, or the pod's service account's)."""
        return str(self._client().configuration.host)

    def apply(self, objects: list[dict[str, Any]]) -> list[str]:
        """Create each object, in order, replacing one that exists (a Namespace is kept): `gpuval deploy kubernetes`
        applying its manifests. Returns what was done, one line per object."""
        return [create(self._client(), obj, replace=True) for obj in objects]

    def _serves(self, kind: str) -> bool:
        """Whether the cluster serves a custom kind (Kubeflow's, the ComputeDomain): its group/version in the
        discovery API (readable by every user, unlike the CRD objects) lists its plural. A 404 is an operator or
        driver that is not installed."""
        from kubernetes import client

        group, version, plural = RESOURCES[kind]
        found = call(f"discovery of {group}/{version}", client.CustomObjectsApi(self._client()).get_api_resources,
                     group, version, missing_ok=True, _request_timeout=DISCOVERY_TIMEOUT_S)
        return found is not None and any(r.name == plural for r in found.resources or [])

    def _send(self, rendered: Rendered) -> str:
        """Create the objects in order, the job last, which then owns the others (owned.send: a refused job leaves
        nothing behind); the job id names the job."""
        owned.send(self._client(), rendered.objects)
        main = rendered.objects[-1]
        return f"{main['metadata']['namespace']}/{main['kind']}/{main['metadata']['name']}"

    def _parse_id(self, job_id: str) -> tuple[str, str, str]:
        parts = job_id.split("/")
        if len(parts) != 3 or parts[1] not in KINDS:
            raise UsageError(f"kubernetes job id {job_id!r}: expected NAMESPACE/KIND/NAME (KIND: {', '.join(KINDS)})")
        return parts[0], parts[1], parts[2]

    def status(self, job_id: str) -> JobStatus:
        """From the object's status conditions; a deleted object is cancelled if gpuval cancelled it."""
        ns, kind, name = self._parse_id(job_id)
        return self._status_of(job_id, read(self._client(), kind, name, ns))

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """One list call per namespace and kind (the objects with gpuval's job label), not one get per job."""
        wanted: dict[tuple[str, str], dict[str, str]] = {}
        for job_id in dict.fromkeys(job_ids):
            ns, kind, name = self._parse_id(job_id)
            wanted.setdefault((ns, kind), {})[name] = job_id
        found: dict[str, JobStatus] = {}
        for (ns, kind), names in wanted.items():
            listed = {obj["metadata"]["name"]: obj for obj in self._list(ns, kind)}
            found.update({job_id: self._status_of(job_id, listed.get(name)) for name, job_id in names.items()})
        return found

    def _list(self, ns: str, kind: str) -> list[dict[str, Any]]:
        """Every object of `kind` in `ns` that gpuval made (its job label), as plain dicts."""
        from kubernetes import client

        api = self._client()
        if kind == "Job":
            jobs = call("list Jobs", client.BatchV1Api(api).list_namespaced_job, ns, label_selector=LABEL)
            return [api.sanitize_for_serialization(job) for job in jobs.items]
        group, version, plural = KINDS[kind]
        listed = call(f"list {kind}s", client.CustomObjectsApi(api).list_namespaced_custom_object, group, version,
                      ns, plural, label_selector=LABEL)
        return list(listed.get("items") or [])

    def _status_of(self, job_id: str, obj: dict[str, Any] | None) -> JobStatus:
        if obj is None:
            record = self.record(job_id)
            if record is not None and record.cancelled:
                return JobStatus(job_id=job_id, engine=self.name, state=JobState.CANCELLED,
                                 native_state="deleted", source="gpuval job record")
            return unknown(self.name, job_id, "no such object (deleted, or never created)")
        conditions = (obj.get("status") or {}).get("conditions") or []
        state, native = _conditions_state(conditions)
        return JobStatus(job_id=job_id, engine=self.name, state=state, native_state=native,
                         source=f"{obj.get('kind', 'object')} status")

    def _job_pods(self, job_id: str) -> tuple[list[Any], Callable[[str], str]]:
        """The job's pods, gpuval's or any other's (pods.job_pods), the lead pod (MPI launcher, PyTorch master,
        index 0) first, and a reader of one pod's log."""
        from kubernetes import client

        ns, kind, name = self._parse_id(job_id)
        core = client.CoreV1Api(self._client())
        pods = job_pods(core, ns, kind, name)

        def read(pod: str) -> str:
            return call(f"logs of {pod}", core.read_namespaced_pod_log, pod, ns)

        return pods, read

    def log_lines(self, job_id: str) -> Iterator[str]:
        """Every pod's log, the lead pod first, fetched concurrently."""
        pods, read = self._job_pods(job_id)
        return pod_log_lines(read, [p.metadata.name for p in pods], LOG_FETCHES)

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        """Every pod's log lines, each tied to the node the scheduler put the pod on (`spec.nodeName`, from the API
        server, not from the pod; a pod not placed yet: None), fetched concurrently."""
        pods, read = self._job_pods(job_id)
        placed = {p.metadata.name: (p.spec.node_name if p.spec else None) for p in pods}
        for pod, text in ordered_map(lambda name: (name, read(name)), list(placed), LOG_FETCHES):
            for line in text_lines(text):
                yield placed[pod], line

    def _running_pods(self, job_id: str) -> list[Any]:
        """The job's pods that run now on a node."""
        pods, _ = self._job_pods(job_id)
        running = [p for p in pods if p.spec and p.spec.node_name and p.status and p.status.phase == "Running"]
        if not running:
            raise JobUnreachable(f"could not diagnose kubernetes job {job_id}: none of its {len(pods)} pod(s) runs "
                                 "now (it ended, it has not started, or its pods are gone)")
        return running

    def placement(self, job_id: str) -> Placement:
        """The nodes of the job's running pods (spec.nodeName, from the API server) and the first pod's start."""
        running = self._running_pods(job_id)
        starts = [p.status.start_time for p in running if p.status.start_time is not None]
        return Placement(list(dict.fromkeys(p.spec.node_name for p in running)), min(starts) if starts else None)

    def render_probe(self, job_id: str, nodes: list[str], args: list[str]) -> list[ProbeCall]:
        """An exec of `gpuval ARGS` in the job's first running pod on each node, in its first container (the
        job's own: it sees the ranks' processes and /tmp). Asks the API server for the pods; sends nothing."""
        ns = self._parse_id(job_id)[0]
        first: dict[str, Any] = {}
        for pod in self._running_pods(job_id):
            first.setdefault(pod.spec.node_name, pod)
        calls = []
        for node in nodes:
            pod = first.get(node)
            where = (("namespace", ns), ("pod", pod.metadata.name), ("container", pod.spec.containers[0].name)) \
                if pod is not None else (("namespace", ns), ("pod", ""), ("container", ""))
            calls.append(ProbeCall(node, ("gpuval", *args), where))
        return calls

    def _probe(self, probe: ProbeCall, timeout_s: float) -> ProbeOutput:
        """pods/exec over the API server's WebSocket (the client's `stream`, as `kubectl exec`), read to a bounded
        size (pods.read_exec); the exit status from its status channel. Each exec gets an ApiClient of its own on
        the same configuration: `stream` swaps its client's request function while it connects, which concurrent
        calls on one client would mix."""
        from kubernetes import client
        from kubernetes.stream import stream

        pod, ns = probe.target("pod"), probe.target("namespace")
        if not pod:
            return ProbeOutput(probe.node, problem=f"no running pod of the job on {probe.node}")
        own = client.ApiClient(self._client().configuration)
        try:
            core = client.CoreV1Api(own)
            resp = call(f"exec in pod {pod}", stream, core.connect_get_namespaced_pod_exec, pod, ns,
                        command=list(probe.argv), container=probe.target("container"), stderr=True, stdin=False,
                        stdout=True, tty=False, _preload_content=False)
        except GpuvalError as exc:
            return ProbeOutput(probe.node, problem=str(exc))
        try:
            said = read_exec(resp, timeout_s)
        finally:
            resp.close()
        if said.cut:
            return ProbeOutput(probe.node, text_lines(said.out), f"exec in pod {pod}: more than {EXEC_OUTPUT_BYTES} "
                                                                 "bytes of output, which no probe prints: cut there "
                                                                 "and the exec closed")
        return answered(probe.node, said.out, said.err, said.code, f"exec in pod {pod}", timeout_s)

    def render_exclude(self, job_id: str, nodes: list[str]) -> Exclusion:
        """Keep the job's pods off `nodes` where gpuval may (its own Kubeflow job), else say how (kubernetes/
        exclude.py); asks the API server, sends nothing."""
        from kubernetes import client

        return render_exclude(self._client(), client.CoreV1Api(self._client()), job_id, self._parse_id(job_id),
                              nodes)

    def _exclude(self, exclusion: Exclusion) -> None:
        send_exclude(self._client(), exclusion)

    def cancel(self, job_id: str) -> None:
        """Delete the job (its pods go with it) and the Service, topology ConfigMap, environment Secret and
        ComputeDomain gpuval made for it, each only where it carries gpuval's label for this job (owned.cancel), and
        remember that it was cancelled. A job gpuval did not make is refused (UsageError, nothing deleted); an
        object of someone else's under one of those names is left, and an EngineError names it after the cancel."""
        ns, kind, name = self._parse_id(job_id)
        left = owned.cancel(self._client(), ns, kind, name)
        self.mark_cancelled(job_id)
        if left:
            raise EngineError(f"kubernetes job {job_id}: cancelled; left {' and '.join(left)} as it is: it has no "
                              f"{LABEL}={name} label, so gpuval did not make it")
