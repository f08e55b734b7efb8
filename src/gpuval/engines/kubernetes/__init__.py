"""Kubernetes, in one place: the engine (engine.py), its manifests (manifests.py), THE one client builder and API
error mapping (client.py), node state and the node list (nodes.py), and the fleet check's view of it (site.py), the
last two handed out by the engine (`KubernetesEngine.node_client`, `KubernetesEngine.site`).

The engine's names are imported on first use: a module of the package (client.py, nodes.py) loads no other."""

from __future__ import annotations

from typing import Any

__all__ = ["KINDS", "LABEL", "KubernetesEngine", "KubernetesOptions", "mpi_master_addr", "pod_log_lines"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpuval.engines.kubernetes import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
