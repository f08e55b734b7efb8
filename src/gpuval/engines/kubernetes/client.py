"""THE one Kubernetes client builder, THE one mapping of API failures and THE one way to an object by its kind
(create or replace, read, patch, delete: `method`), for the engine, the fleet check's node queries, node state
(taint, label) and `gpuval deploy kubernetes`.

The client is an ApiClient of its own (kubeconfig, else the pod's service account), never the client library's
global default configuration: two callers in one process (a fleet check with a context of its own and the node it
taints) never change each other's cluster. Every API call goes through `call`: an ApiException, or a server that
cannot be reached, is one EngineError line naming what was asked (a 409 is a Conflict, for the callers that read
and write again; a 404 is None where the caller says a missing object is an answer).
"""

from __future__ import annotations

import os
import re
from functools import partial
from typing import Any, Callable

from gpuval.errors import EngineError, GpuvalError, MissingDependency, UsageError


class Conflict(EngineError):
    """409 from the API: the object exists already (create) or changed since it was read (patch with a
    resourceVersion)."""


def api_client(context: str | None = None, pool_size: int | None = None) -> Any:
    """An ApiClient from the kubeconfig (KUBECONFIG, ~/.kube/config; `context` or the current one), else from the
    service account of the pod this runs in (a DaemonSet's); `pool_size`: connections kept for calls in flight."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise MissingDependency("the kubernetes client is not installed: pip install 'gpuval[engines]'") from None
    configuration = client.Configuration()
    try:
        # KUBECONFIG read now (the library reads it once, when it is imported), a list of files included
        config.load_kube_config(os.environ.get("KUBECONFIG") or None, context, client_configuration=configuration)
    except Exception as exc:  # no kubeconfig, or no such context: try the pod's service account
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except Exception:
            raise EngineError(f"no usable kubeconfig (~/.kube/config, KUBECONFIG: {why}) and not inside a "
                              "cluster") from None
    if pool_size:
        configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def call(what: str, func: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
    """func(*args, **kwargs); any failure is one EngineError line naming `what` (a 409 is a Conflict; with
    `missing_ok` a 404 returns None)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return func(*args, **kwargs)
    except ApiException as exc:
        if missing_ok and exc.status == 404:
            return None
        if exc.status == 409:
            raise Conflict(f"kubernetes {what}: 409 {exc.reason}") from None
        # 403: what is missing is a right; on a node, the DaemonSet's ServiceAccount gets them from deploy
        hint = (" (the account lacks the right; a node's gpuval gets it from the ClusterRole of `gpuval deploy "
                "kubernetes`)") if exc.status == 403 else ""
        raise EngineError(f"kubernetes {what}: {exc.status} {exc.reason}{hint}") from None
    except GpuvalError:
        raise
    except Exception as exc:  # urllib3's MaxRetryError and the like: the server is not there
        raise EngineError(f"kubernetes {what}: {_reason(exc)}") from None


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


# kind -> (API class, the kind in the client's method names, namespaced): create_namespaced_secret,
# read_cluster_role... The Kubeflow kinds and the ComputeDomain go through the custom objects API (group, version
# and plural from manifests.RESOURCES).
_API = {
    "Namespace": ("CoreV1Api", "namespace", False),
    "ServiceAccount": ("CoreV1Api", "service_account", True),
    "ConfigMap": ("CoreV1Api", "config_map", True),
    "Secret": ("CoreV1Api", "secret", True),
    "Service": ("CoreV1Api", "service", True),
    "Pod": ("CoreV1Api", "pod", True),
    "Job": ("BatchV1Api", "job", True),
    "CronJob": ("BatchV1Api", "cron_job", True),
    "DaemonSet": ("AppsV1Api", "daemon_set", True),
    "ClusterRole": ("RbacAuthorizationV1Api", "cluster_role", False),
    "ClusterRoleBinding": ("RbacAuthorizationV1Api", "cluster_role_binding", False),
    "ValidatingAdmissionPolicy": ("AdmissionregistrationV1Api", "validating_admission_policy", False),
    "ValidatingAdmissionPolicyBinding": ("AdmissionregistrationV1Api", "validating_admission_policy_binding", False),
}
_CUSTOM = ("MPIJob", "PyTorchJob", "ComputeDomain")
_KEPT = ("Namespace",)  # an apply keeps one that exists: replacing a namespace would change nothing gpuval owns


def method(api: Any, verb: str, kind: str, namespace: str | None, name: str | None = None) -> Callable[..., Any]:
    """The client's `verb` (create, read, replace, patch, delete) for an object of `kind` gpuval makes, with its
    leading arguments (name, namespace; group, version and plural for a custom kind) bound: what is left is the
    body, where the verb takes one. Another kind is a one-line error, before any call."""
    from kubernetes import client

    head = [name] if name is not None else []
    if kind in _CUSTOM:
        from gpuval.engines.kubernetes.manifests import RESOURCES

        group, version, plural = RESOURCES[kind]
        func = getattr(client.CustomObjectsApi(api), f"{'get' if verb == 'read' else verb}_namespaced_custom_object")
        return partial(func, group, version, namespace, plural, *head)
    if kind not in _API:
        raise UsageError(f"cannot apply a {kind}: gpuval makes {', '.join([*_API, *_CUSTOM])}")
    cls, noun, namespaced = _API[kind]
    func = getattr(getattr(client, cls)(api), f"{verb}_{'namespaced_' if namespaced else ''}{noun}")
    return partial(func, *head, *([namespace] if namespaced else []))


def plain(api: Any, answer: Any) -> dict[str, Any]:
    """An API answer as a plain dict (the typed client's models as their JSON; a custom object is one already)."""
    return answer if isinstance(answer, dict) else api.sanitize_for_serialization(answer)


def created(api: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """Create one object; returns it as the API server answered (with its uid)."""
    kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
    return plain(api, call(f"create {kind} {name}", method(api, "create", kind, ns), obj))


def read(api: Any, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
    """One object as a plain dict, or None where there is none."""
    found = call(f"get {kind} {name}", method(api, "read", kind, namespace, name), missing_ok=True)
    return None if found is None else plain(api, found)


def delete(api: Any, kind: str, obj: dict[str, Any]) -> None:
    """Delete the object of `kind` that was read or created as `obj`, only while it is still that one (its uid: a
    namesake made since stays), and what it owns with it, in the background (a job's pods). One gone already is
    no error."""
    from kubernetes import client

    meta = obj["metadata"]
    same = client.V1Preconditions(uid=meta["uid"]) if meta.get("uid") else None
    body = client.V1DeleteOptions(propagation_policy="Background", preconditions=same)
    call(f"delete {kind} {meta['name']}", method(api, "delete", kind, meta.get("namespace"), meta["name"]),
         body=body, missing_ok=True)


def patch(api: Any, kind: str, obj: dict[str, Any], body: dict[str, Any]) -> None:
    """Merge `body` into the object of `kind` that `obj` (as read or created) names."""
    meta = obj["metadata"]
    call(f"patch {kind} {meta['name']}", method(api, "patch", kind, meta.get("namespace"), meta["name"]), body)


def create(api: Any, obj: dict[str, Any], replace: bool = False) -> str:
    """Create one object of a kind gpuval makes (another kind is a one-line error, before any call); with
    `replace`, one that exists already (409) is replaced by this one, a Namespace kept as it is. Returns "created
    KIND NAME", "replaced KIND NAME" or "kept KIND NAME"."""
    kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
    try:
        created(api, obj)
        return f"created {kind} {name}"
    except Conflict:
        if not replace:
            raise
    if kind in _KEPT:
        return f"kept {kind} {name}"
    call(f"replace {kind} {name}", method(api, "replace", kind, ns, name), obj)
    return f"replaced {kind} {name}"
