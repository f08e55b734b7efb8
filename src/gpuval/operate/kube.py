"""The official Kubernetes client for operate: an ApiClient of its own (kubeconfig, else the pod's service account),
never the client library's global default configuration, and API errors as one-line EngineErrors."""

from __future__ import annotations

from typing import Any, Callable

from gpuval.errors import EngineError, MissingDependency


class Conflict(EngineError):
    """409 from the API: the object exists already (create) or changed since it was read (patch with a
    resourceVersion)."""


def api_client(context: str | None = None) -> Any:
    """An ApiClient from the kubeconfig (KUBECONFIG, ~/.kube/config; `context` or the current one), else from the
    service account of the pod this runs in (a DaemonSet's)."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise MissingDependency("the kubernetes client is not installed: pip install 'gpuval[engines]'") from None
    try:
        return config.new_client_from_config(context=context)
    except Exception as exc:  # no kubeconfig, or no such context: try the pod's service account
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except Exception:
        raise EngineError(f"no usable kubeconfig (~/.kube/config, KUBECONFIG: {why}) and not inside a "
                          "cluster") from None
    return client.ApiClient(configuration)


def call(what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the API; an ApiException or a connection error becomes one EngineError line naming `what` (a 409 is
    a Conflict, for the callers that handle it)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return func(*args, **kwargs)
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict(f"kubernetes {what}: 409 {exc.reason}") from None
        hint = " (its ServiceAccount needs the ClusterRole of `gpuval deploy kubernetes`)" if exc.status == 403 else ""
        raise EngineError(f"kubernetes {what}: {exc.status} {exc.reason}{hint}") from None
    except Exception as exc:  # urllib3 connection errors: keep their first line
        raise EngineError(f"kubernetes {what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
