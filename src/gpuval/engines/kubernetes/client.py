"""THE one Kubernetes client builder and THE one mapping of API failures, for the engine, the fleet check's node
queries, node state (taint, label) and `gpuval deploy kubernetes`.

The client is an ApiClient of its own (kubeconfig, else the pod's service account), never the client library's
global default configuration: two callers in one process (a fleet check with a context of its own and the node it
taints) never change each other's cluster. Every API call goes through `call`: an ApiException, or a server that
cannot be reached, is one EngineError line naming what was asked (a 409 is a Conflict, for the callers that read
and write again; a 404 is None where the caller says a missing object is an answer).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from gpuval.errors import EngineError, GpuvalError, MissingDependency


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
