"""Kubernetes nodes through the one client (client.py): one read-modify-write of a node's taints, labels and
annotations (the names gpuval writes there, a health label with the run id, its own NoSchedule taint and
annotations, are engines/nodes.py's), and the node list the fleet check reads. What to write for which verdict is
operate.node_state's policy.

A node's taints are one list (no merge key: a patch replaces it whole), so `edit_node` reads the node, lets the
caller compute the new list, and sends it back with the resourceVersion it read: if anything changed the node
meanwhile (another controller's taint, another gpuval's untaint), the API server answers 409 and the node is read
and decided again. Labels and annotations go in the same merge patch, and every patch carries the resourceVersion,
an annotation-only one too: its annotation (the fault codes a taint stands for) is decided on what was read.

The census (`census`: what the drain brake counts) is one list of every node: each as the same NodeView an edit
reads, with the time its owner's mark was written (gpuval.io/health-time, written in the patch that sets the taint).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from gpuval.engines.kubernetes.client import Conflict, api_client, call
from gpuval.engines.nodes import (
    FAULTS_ANNOTATION, TAINT_KEY, Census, HeldNode, NodeClient, NodeEdit, NodeOwner, NodePolicy, NodeView, mark_of,
)
from gpuval.errors import EngineError

ATTEMPTS = 3


def edit_node(node: str, edit: Callable[[NodeView], NodeEdit], client: Any = None) -> NodeView:
    """Read the node, ask `edit` for the change given what it read, write it with the resourceVersion read (read
    again on a 409, up to ATTEMPTS times). Returns the view the written change was computed from."""
    from kubernetes import client as k8s

    api = client or api_client()
    core = k8s.CoreV1Api(api)
    for _ in range(ATTEMPTS):
        current = call(f"get node {node}", core.read_node, node)
        meta = current.metadata
        seen = view_of(api, current)
        change = edit(seen)
        body: dict[str, Any] = {"metadata": {**change.metadata, "resourceVersion": meta and meta.resource_version}}
        if change.taints is not None:
            body["spec"] = {"taints": change.taints}
        try:
            call(f"patch node {node}", core.patch_node, node, body, _content_type="application/merge-patch+json")
        except Conflict:
            continue  # the node changed since it was read: read it and decide again
        return seen
    raise EngineError(f"kubernetes patch node {node}: it changed under every one of {ATTEMPTS} tries")


def view_of(api: Any, node: Any) -> NodeView:
    """A node object as the NodeView a policy or an owner reads: its taints, labels and annotations."""
    meta = node.metadata
    return NodeView([api.sanitize_for_serialization(t) for t in ((node.spec and node.spec.taints) or [])],
                    dict((meta and meta.labels) or {}), dict((meta and meta.annotations) or {}))


def mark_time(view: NodeView) -> datetime | None:
    """When gpuval last wrote its taint and codes on the node (engines.nodes.mark_of; a verdict that leaves them
    moves nothing); None when absent or no time."""
    return mark_of(view.annotations)[0]


def census(owner: NodeOwner, client: Any = None) -> Census:
    """Every node of the cluster and those `owner` holds, from one list call."""
    api = client or api_client()
    listed = list_nodes(api)
    held = []
    for name, node in listed.items():
        view = view_of(api, node)
        if owner.kubernetes(view):
            held.append(HeldNode(name, str(view.annotations.get(FAULTS_ANNOTATION) or ""), mark_time(view)))
    return Census(len(listed), tuple(held))


class KubernetesNodes(NodeClient):
    """Kubernetes' node client: the API through the ApiClient `connect()` gives (None: kubeconfig, else in-cluster),
    asked for when the first node is edited, so a client made to check an option (a dry run) never connects."""

    scheduler = "kubernetes"

    def __init__(self, connect: Callable[[], Any] = lambda: None) -> None:
        self.connect = connect

    def edit(self, node: str, policy: NodePolicy) -> None:
        edit_node(node, policy.kubernetes, self.connect())

    def census(self, owner: NodeOwner) -> Census:
        return census(owner, self.connect())


def list_nodes(client: Any) -> dict[str, Any]:
    """Every node of the cluster by name (one list call)."""
    from kubernetes import client as k8s

    return {n.metadata.name: n for n in call("list nodes", k8s.CoreV1Api(client).list_node).items}


def why_unschedulable(node: Any, tainted_ok: bool = False) -> str:
    """Why a node cannot take a job now ('' when it can): not Ready, cordoned, or still under gpuval's taint
    (`tainted_ok`: a re-test's pods tolerate it)."""
    spec, status = node.spec, node.status
    ready = next((c.status for c in (status.conditions or []) if c.type == "Ready"), "Unknown") if status else "?"
    if ready != "True":
        return f"not Ready ({ready})"
    if spec is not None and spec.unschedulable:
        return "cordoned (unschedulable)"
    if not tainted_ok and spec is not None and any(t.key == TAINT_KEY for t in spec.taints or []):
        return f"tainted {TAINT_KEY} by an earlier gpuval run"
    return ""
