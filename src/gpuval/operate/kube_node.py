"""Kubernetes node state through the official client: a health label with the run id on every verdict, and
gpuval's own NoSchedule taint on failure, removed on a later pass.

A node's taints are one list (no merge key: a patch replaces it whole), so gpuval reads the node, edits only its
own taint in the list, and sends the list back with the resourceVersion it read: if anything changed the node
meanwhile (another controller's taint), the API server answers 409 and gpuval reads again. A taint with another key
(nvidia.com/gpu, an admin's, NVSentinel's) is never removed. Labels and annotations go in the same merge patch.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Sequence

from gpuval.errors import EngineError
from gpuval.operate import kube
from gpuval.operate.node_state import NodeAction, safe_codes, safe_run_id
from gpuval.results.model import Status

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
    return {"key": TAINT_KEY, "effect": TAINT_EFFECT}


def plan_taints(verdict: Status, taints: list[dict[str, Any]],
                hold: str = "") -> tuple[list[dict[str, Any]] | None, str]:
    """The node's new taint list (None: leave the list alone) and the action: pure, the whole rule in one place.
    `hold`: why a PASS or WARN must not remove gpuval's taint now."""
    ours = [t for t in taints if t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT]
    if verdict is Status.FAIL:
        return (None, "unchanged") if ours else ([*taints, own_taint()], "tainted")
    if verdict in (Status.PASS, Status.WARN) and hold:
        return None, "unchanged"
    if verdict in (Status.PASS, Status.WARN):
        return ([t for t in taints if t not in ours], "untainted") if ours else (None, "unchanged")
    return None, "unchanged"  # ERROR, SKIPPED: says nothing about the hardware


def metadata_patch(verdict: Status, run_id: str, codes: Sequence[str], now: datetime,
                   hold: str = "") -> dict[str, Any]:
    """Labels and annotations of one verdict (merge patch: None deletes a key); under a hold the fault codes of
    the taint that stays are kept."""
    annotations: dict[str, Any] = {TIME_ANNOTATION: now.isoformat(timespec="seconds")}
    if verdict is Status.FAIL:
        annotations[FAULTS_ANNOTATION] = " ".join(safe_codes(codes)) or "FAIL"
    elif verdict in (Status.PASS, Status.WARN) and not hold:
        annotations[FAULTS_ANNOTATION] = None
    run = label_value(safe_run_id(run_id)) or "unknown-run"
    return {"labels": {HEALTH_LABEL: verdict.value, RUN_LABEL: run}, "annotations": annotations}


def _detail(action: str, verdict: Status, hold: str = "", tainted: bool = False) -> str:
    if hold and tainted and verdict in (Status.PASS, Status.WARN):
        return f"labelled {verdict.value}; gpuval's taint {TAINT_KEY} kept: {hold}"
    if action == "tainted":
        return f"failed checks: tainted {TAINT_KEY}:{TAINT_EFFECT}"
    if action == "untainted":
        return f"healthy again: gpuval's taint {TAINT_KEY} removed"
    if verdict in (Status.ERROR, Status.SKIPPED):
        return f"labelled {verdict.value}; taints left as they are (nothing judged)"
    return f"labelled {verdict.value}"


def apply_kubernetes(verdict: Status, node: str, run_id: str, fault_codes: Sequence[str],
                     api_client: Any = None, hold: str = "") -> NodeAction:
    """Label the node with the verdict and run id; taint it on FAIL, untaint (gpuval's taint only) on PASS/WARN."""
    from kubernetes import client

    api = api_client or kube.api_client()
    core = client.CoreV1Api(api)
    for _ in range(ATTEMPTS):
        current = kube.call(f"get node {node}", core.read_node, node)
        taints = [api.sanitize_for_serialization(t) for t in ((current.spec and current.spec.taints) or [])]
        new_taints, action = plan_taints(verdict, taints, hold)
        now = datetime.now(timezone.utc)
        body: dict[str, Any] = {"metadata": metadata_patch(verdict, run_id, fault_codes, now, hold)}
        if new_taints is not None:
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            body["spec"] = {"taints": new_taints}
        try:
            kube.call(f"patch node {node}", core.patch_node, node, body,
                      _content_type="application/merge-patch+json")
        except kube.Conflict:
            continue  # the node changed since it was read: read it again
        tainted = any(t.get("key") == TAINT_KEY for t in taints)
        return NodeAction("kubernetes", node, verdict, action, _detail(action, verdict, hold, tainted))
    raise EngineError(f"kubernetes patch node {node}: it changed under every one of {ATTEMPTS} tries")
