"""Kubernetes, in one place: the engine (engine.py), its manifests (manifests.py), THE one client builder and API
error mapping (client.py), node state and the node list (nodes.py), and the fleet check's view of it (site.py)."""

from __future__ import annotations

from gpuval.engines.kubernetes.engine import KubernetesEngine, pod_log_lines
from gpuval.engines.kubernetes.manifests import KINDS, LABEL, KubernetesOptions, mpi_master_addr

__all__ = ["KINDS", "LABEL", "KubernetesEngine", "KubernetesOptions", "mpi_master_addr", "pod_log_lines"]
