"""THE one Kubernetes client builder, THE one mapping of API failures and THE one create (or replace) of an object by
its kind, for the engine, the fleet check's node queries, node state (taint, label) and `gpuval deploy kubernetes`.

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


# kind -> (API class, create method, replace method (None: one that exists is kept), namespaced). The Kubeflow kinds
# go through the custom objects API (group, version and plural from manifests.KINDS).
_API = {
    "Namespace": ("CoreV1Api", "create_namespace", None, False),
    "ServiceAccount": ("CoreV1Api", "create_namespaced_service_account", "replace_namespaced_service_account", True),
    "ConfigMap": ("CoreV1Api", "create_namespaced_config_map", "replace_namespaced_config_map", True),
    "Secret": ("CoreV1Api", "create_namespaced_secret", "replace_namespaced_secret", True),
    "Service": ("CoreV1Api", "create_namespaced_service", "replace_namespaced_service", True),
    "Job": ("BatchV1Api", "create_namespaced_job", "replace_namespaced_job", True),
    "CronJob": ("BatchV1Api", "create_namespaced_cron_job", "replace_namespaced_cron_job", True),
    "DaemonSet": ("AppsV1Api", "create_namespaced_daemon_set", "replace_namespaced_daemon_set", True),
    "ClusterRole": ("RbacAuthorizationV1Api", "create_cluster_role", "replace_cluster_role", False),
    "ClusterRoleBinding": ("RbacAuthorizationV1Api", "create_cluster_role_binding", "replace_cluster_role_binding",
                           False),
    "ValidatingAdmissionPolicy": ("AdmissionregistrationV1Api", "create_validating_admission_policy",
                                  "replace_validating_admission_policy", False),
    "ValidatingAdmissionPolicyBinding": ("AdmissionregistrationV1Api", "create_validating_admission_policy_binding",
                                         "replace_validating_admission_policy_binding", False),
}
_CUSTOM = ("MPIJob", "PyTorchJob")


def create(api: Any, obj: dict[str, Any], replace: bool = False) -> str:
    """Create one object of a kind gpuval makes (another kind is a one-line error, before any call); with
    `replace`, one that exists already (409) is replaced by this one, a Namespace kept as it is. Returns "created
    KIND NAME", "replaced KIND NAME" or "kept KIND NAME"."""
    from kubernetes import client

    kind, name, ns = obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace")
    again: Callable[..., Any] | None
    if kind in _CUSTOM:
        from gpuval.engines.kubernetes.manifests import KINDS

        custom, (group, version, plural) = client.CustomObjectsApi(api), KINDS[kind]
        make = partial(custom.create_namespaced_custom_object, group, version, ns, plural)
        again = partial(custom.replace_namespaced_custom_object, group, version, ns, plural, name)
    elif kind in _API:
        cls, create_method, replace_method, namespaced = _API[kind]
        target, where = getattr(client, cls)(api), ([ns] if namespaced else [])
        make = partial(getattr(target, create_method), *where)
        again = partial(getattr(target, replace_method), name, *where) if replace_method else None
    else:
        raise UsageError(f"cannot apply a {kind}: gpuval makes {', '.join([*_API, *_CUSTOM])}")
    try:
        call(f"create {kind} {name}", make, obj)
        return f"created {kind} {name}"
    except Conflict:
        if not replace:
            raise
    if again is None:
        return f"kept {kind} {name}"
    call(f"replace {kind} {name}", again, obj)
    return f"replaced {kind} {name}"
