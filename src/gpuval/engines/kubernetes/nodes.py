"""Kubernetes nodes through the one client (client.py): the names gpuval writes on a node (a health label with the
run id, its own NoSchedule taint, annotations), one read-modify-write of a node's taints, labels and annotations,
and the node list the fleet check reads. What to write for which verdict is operate.node_state's policy.

A node's taints are one list (no merge key: a patch replaces it whole), so `edit_node` reads the node, lets the
caller compute the new list, and sends it back with the resourceVersion it read: if anything changed the node
meanwhile (another controller's taint), the API server answers 409 and the node is read again. Labels and
annotations go in the same merge patch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuval.engines.kubernetes.client import Conflict, api_client, call
from gpuval.errors import EngineError

HEALTH_LABEL = "gpuval.io/health"            # pass | warn | fail | error | skipped: the last run's verdict
RUN_LABEL = "gpuval.io/health-run"           # that run's id (label-safe), to find its records
FAULTS_ANNOTATION = "gpuval.io/health-faults"  # the failed fault codes, while gpuval's taint is on
TIME_ANNOTATION = "gpuval.io/health-time"    # when the verdict was set (UTC)
TAINT_KEY = "gpuval.io/unhealthy"
TAINT_EFFECT = "NoSchedule"
ATTEMPTS = 3
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], starting and ending with a letter or digit."""
    return _LABEL_BAD.sub("-", text).strip("-_.")[:63].rstrip("-_.")


def own_taint() -> dict[str, str]:
    """gpuval's taint: its key with NoSchedule (the same key with another effect is someone else's)."""
    return {"key": TAINT_KEY, "effect": TAINT_EFFECT}


def is_own_taint(taint: dict[str, Any]) -> bool:
    return taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT


@dataclass
class NodeView:
    """What a node edit is computed from: the node's taints, labels and annotations as read."""

    taints: list[dict[str, Any]]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeEdit:
    """One change to a node: its new taint list (None: leave the list alone) and a merge patch of its metadata
    (labels and annotations; None deletes a key)."""

    taints: list[dict[str, Any]] | None
    metadata: dict[str, Any] = field(default_factory=dict)


def edit_node(node: str, edit: Callable[[NodeView], NodeEdit], client: Any = None) -> NodeView:
    """Read the node, ask `edit` for the change given what it read, write it with the resourceVersion read (read
    again on a 409, up to ATTEMPTS times). Returns the view the written change was computed from."""
    from kubernetes import client as k8s

    api = client or api_client()
    core = k8s.CoreV1Api(api)
    for _ in range(ATTEMPTS):
        current = call(f"get node {node}", core.read_node, node)
        meta = current.metadata
        seen = NodeView([api.sanitize_for_serialization(t) for t in ((current.spec and current.spec.taints) or [])],
                        dict((meta and meta.labels) or {}), dict((meta and meta.annotations) or {}))
        change = edit(seen)
        body: dict[str, Any] = {"metadata": dict(change.metadata)}
        if change.taints is not None:
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            body["spec"] = {"taints": change.taints}
        try:
            call(f"patch node {node}", core.patch_node, node, body, _content_type="application/merge-patch+json")
        except Conflict:
            continue  # the node changed since it was read: read it again
        return seen
    raise EngineError(f"kubernetes patch node {node}: it changed under every one of {ATTEMPTS} tries")


def list_nodes(client: Any) -> dict[str, Any]:
    """Every node of the cluster by name (one list call)."""
    from kubernetes import client as k8s

    return {n.metadata.name: n for n in call("list nodes", k8s.CoreV1Api(client).list_node).items}


def why_unschedulable(node: Any) -> str:
    """Why a node cannot take a job now ('' when it can): not Ready, cordoned, or still under gpuval's taint."""
    spec, status = node.spec, node.status
    ready = next((c.status for c in (status.conditions or []) if c.type == "Ready"), "Unknown") if status else "?"
    if ready != "True":
        return f"not Ready ({ready})"
    if spec is not None and spec.unschedulable:
        return "cordoned (unschedulable)"
    if spec is not None and any(t.key == TAINT_KEY for t in spec.taints or []):
        return f"tainted {TAINT_KEY} by an earlier gpuval run"
    return ""
