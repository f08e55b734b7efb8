"""Kubernetes: the manifests of kubernetes_manifests.py, sent with the official client (kubeconfig, else
in-cluster). Job ids are `NAMESPACE/KIND/NAME`, NAME being the spec's name and a hash of the spec (render).

With kind `auto` the operator's kind (MPIJob, PyTorchJob) goes only where the cluster serves it: `discover` asks
the discovery API, for the dry run and the submit alike, and the plain indexed Job goes where it does not. A dry run
that can reach no cluster shows the operator's kind and says so in a note. Every API call goes through `_call`:
an API error or an unreachable server is one line (EngineError, exit 2). Pod logs are fetched 16 at a time and
handed on in pod order. Tested with the official client against kmock (tests/engines/test_kubernetes.py).
"""

from __future__ import annotations

import io
import re
from typing import Any, Callable, Iterator

import yaml

from gpuval.engines import records
from gpuval.engines.base import Engine, Facts, Rendered, unique_name, unknown
from gpuval.engines.kubernetes_manifests import (
    KINDS, LABEL, KubernetesOptions, job_configmap, kind_of, manifests, mpi_master_addr,
)
from gpuval.engines.launch import default_image
from gpuval.engines.output import ordered_map
from gpuval.engines.spec import JobSpec, JobState, JobStatus
from gpuval.errors import EngineError, GpuvalError, MissingDependency, UsageError

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


def _reason(exc: Exception) -> str:
    """One line for a transport failure: urllib3 names the server and why it could not be reached."""
    from urllib3.exceptions import MaxRetryError

    if isinstance(exc, MaxRetryError):
        pool = exc.pool
        where = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else "the API server"
        why = re.sub(r"<[^>]*>:\s*", "", str(exc.reason or "")).strip("()' ")
        return f"cannot reach the API server at {where}: {why.splitlines()[0] if why else 'no answer'}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def pod_log_lines(read: Callable[[str], str], pods: list[str], width: int = LOG_FETCHES) -> Iterator[str]:
    """Every pod's log, line by line in the order of `pods` (under a `==> pod NAME <==` line when there are
    several), with `width` reads in flight: a 4,096-pod job costs 4,096 / width round trips, not 4,096."""
    many = len(pods) > 1
    for pod, text in ordered_map(lambda name: (name, read(name)), pods, width):
        if many:
            yield f"==> pod {pod} <==\n"
        for line in io.StringIO(text):
            yield line if line.endswith("\n") else line + "\n"  # a log may end without one


class KubernetesEngine(Engine[KubernetesOptions]):
    """Runs the job on a Kubernetes cluster."""

    name = "kubernetes"
    Options = KubernetesOptions

    def __init__(self, options: dict[str, Any] | None = None, api_client: Any = None) -> None:
        super().__init__(options)
        self._api_client = api_client

    def discover(self, spec: JobSpec, strict: bool) -> Facts:
        """With kind auto and a launcher whose operator kind is wanted: does the cluster serve that kind?"""
        options = self.options_for(spec)
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
        configuration = client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = LOG_FETCHES  # one connection per log fetch in flight
        self._api_client = client.ApiClient(configuration)
        return self._api_client

    def _call(self, what: str, func: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """func(*args, **kwargs); any failure is one line naming `what`. missing_ok: a 404 returns None."""
        from kubernetes.client.exceptions import ApiException

        try:
            return func(*args, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise EngineError(f"kubernetes {what}: {exc.status} {exc.reason}") from None
        except GpuvalError:
            raise
        except Exception as exc:  # urllib3's MaxRetryError and the like: the server is not there
            raise EngineError(f"kubernetes {what}: {_reason(exc)}") from None

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

        group, version, plural = KINDS[kind]
        found = self._call(f"discovery of {group}/{version}", client.CustomObjectsApi(self._client()).get_api_resources,
                           group, version, missing_ok=True, _request_timeout=DISCOVERY_TIMEOUT_S)
        return found is not None and any(r.name == plural for r in found.resources or [])

    def _send(self, rendered: Rendered) -> str:
        """Create the objects in order; the job id names the last (the job itself)."""
        for obj in rendered.objects:
            self._create(obj)
        main = rendered.objects[-1]
        return f"{main['metadata']['namespace']}/{main['kind']}/{main['metadata']['name']}"

    def _parse_id(self, job_id: str) -> tuple[str, str, str]:
        parts = job_id.split("/")
        if len(parts) != 3 or parts[1] not in KINDS:
            raise UsageError(f"kubernetes job id {job_id!r}: expected NAMESPACE/KIND/NAME (KIND: {', '.join(KINDS)})")
        return parts[0], parts[1], parts[2]

    def _get(self, job_id: str) -> dict[str, Any] | None:
        from kubernetes import client

        ns, kind, name = self._parse_id(job_id)
        api = self._client()
        if kind == "Job":
            job = self._call(f"get Job {name}", client.BatchV1Api(api).read_namespaced_job, name, ns, missing_ok=True)
            return None if job is None else api.sanitize_for_serialization(job)
        group, version, plural = KINDS[kind]
        return self._call(f"get {kind} {name}", client.CustomObjectsApi(api).get_namespaced_custom_object,
                          group, version, ns, plural, name, missing_ok=True)

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

    def log_lines(self, job_id: str) -> Iterator[str]:
        """Every pod's log, the lead pod (MPI launcher, PyTorch master, index 0) first, fetched concurrently."""
        from kubernetes import client

        ns, _, name = self._parse_id(job_id)
        core = client.CoreV1Api(self._client())
        pods = self._call("list pods", core.list_namespaced_pod, ns, label_selector=f"{LABEL}={name}").items
        pods.sort(key=lambda p: ((p.metadata.labels or {}).get("gpuval.io/role") != "lead", p.metadata.name))

        def read(pod: str) -> str:
            return self._call(f"logs of {pod}", core.read_namespaced_pod_log, pod, ns)

        return pod_log_lines(read, [p.metadata.name for p in pods], LOG_FETCHES)

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
        self._call(f"delete ConfigMap {job_configmap(name)}", client.CoreV1Api(api).delete_namespaced_config_map,
                   job_configmap(name), ns, missing_ok=True)  # a job without a ConfigMap of its own has none
        records.mark_cancelled(self.name, job_id)

