"""Moving a running Kubernetes job off nodes (engines/exclude.py): a node affinity that keeps its pods off them, on
each of its pod templates, then its pods on those nodes deleted, so that its controller makes them again elsewhere.

What the API server and the controllers allow:
- A Kubeflow job's pod templates (an MPIJob's mpiReplicaSpecs, a PyTorchJob's pytorchReplicaSpecs) may change
  while it runs, and its operator makes a missing replica's pod again from the template as it is then (the MPI
  operator's workers, the training operator's replicas), so the new pod lands off those nodes. An MPIJob's launcher
  runs under a batch Job the operator made from its template once: a launcher pod on those nodes is left, and said.
  What the job's program does when one of its pods is replaced is its own (torchrun's elastic agent restarts its
  workers with the new pod; an MPI job whose worker goes fails and is restarted by its launcher's backoffLimit, or
  not).
- A batch Job's pod template may change only while the Job is suspended and has never started (the API server's
  AllowMutableSchedulingDirectives, KEP-2926): a running Job cannot be moved; the affinity to send it again with is
  given instead.
- gpuval changes only what it made (its label, as `cancel` checks): for another job the affinity to add and its pods
  on those nodes are given, nothing is sent.

The affinity: a node field selector `metadata.name NotIn [NODE]` (the node's name, whatever its labels say), one
requirement per node (the API server takes one value per node field requirement), added to every term of the
template's required node affinity (terms are ORed: each must keep the pods off), or as a term of its own where it
has none. Its other affinities are left as they are.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from gpuval.engines.exclude import ExcludeStep, Exclusion
from gpuval.engines.kubernetes.client import delete, patch, read
from gpuval.engines.kubernetes.manifests import LABEL
from gpuval.engines.kubernetes.owned import is_jobs
from gpuval.engines.kubernetes.pods import job_pods
from gpuval.errors import EngineError, GpuvalError

_REPLICAS = {"MPIJob": "mpiReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs"}
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod_templates(obj: dict[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """The job's pod templates, each by its path in the object (a Job's one, a Kubeflow job's one per replica)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") not in _REPLICAS:
        return {("spec", "template"): spec.get("template") or {}}
    key = _REPLICAS[obj["kind"]]
    return {("spec", key, role, "template"): (replica or {}).get("template") or {}
            for role, replica in (spec.get(key) or {}).items()}


def kept_off(affinity: dict[str, Any] | None, nodes: list[str]) -> dict[str, Any]:
    """`affinity` (a pod template's) that also keeps its pods off `nodes` (see the module)."""
    found = copy.deepcopy(affinity or {})
    required = found.setdefault("nodeAffinity", {}).setdefault(_REQUIRED, {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        fields = term.setdefault("matchFields", [])
        fields += [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in nodes
                   if n not in _avoided(term)]
    required["nodeSelectorTerms"] = terms
    return found


def _avoided(term: dict[str, Any]) -> set[str]:
    """The nodes one node selector term keeps pods off by name."""
    return {v for r in term.get("matchFields") or [] if r.get("key") == "metadata.name" and r.get("operator") == "NotIn"
            for v in r.get("values") or []}


def render_exclude(api: Any, core: Any, job_id: str, ident: tuple[str, str, str], nodes: list[str]) -> Exclusion:
    """The steps that move job `job_id` (namespace, kind, name: `ident`) off `nodes`, or what its user does where
    gpuval may not; asks the API server for the job and its pods, and sends nothing."""
    ns, kind, name = ident
    obj = read(api, kind, name, ns)
    if obj is None:
        raise EngineError(f"kubernetes {kind} {name}: no such object in namespace {ns}: nothing to move")
    templates = pod_templates(obj)
    affinity = {path: kept_off((t.get("spec") or {}).get("affinity"), nodes) for path, t in templates.items()}
    earlier = [n for t in templates.values() for term in _terms(t) for n in sorted(_avoided(term))]
    done = Exclusion(job_id, "kubernetes", list(nodes), list(dict.fromkeys([*earlier, *nodes])))
    pods = [p for p in job_pods(core, ns, kind, name)
            if p.spec and p.spec.node_name in nodes and p.status and p.status.phase in ("Running", "Pending")]
    shown = json.dumps(next(iter(affinity.values()), {}), separators=(",", ":"))
    if not is_jobs(obj, name):
        placed = ", ".join(f"{p.metadata.name} on {p.spec.node_name}" for p in pods) or "none now"
        done.advice = (f"gpuval changes only what it made, and {kind} {name} was not (it has no {LABEL}={name} label): "
                       f"add to its pod template(s) ({', '.join('.'.join(path) for path in templates)}) spec.affinity "
                       f"{shown}, then delete its pods on {', '.join(nodes)} ({placed}) so that its controller makes "
                       "them elsewhere")
    elif kind not in _REPLICAS:
        done.advice = (f"a started Job's pod template cannot change (Kubernetes allows it only while a Job is "
                       f"suspended and has never started): cancel it and send it again with spec.affinity {shown} in "
                       "its pod template")
    else:
        done.steps = _steps(ident, nodes, affinity, pods)
    return done


def _steps(ident: tuple[str, str, str], nodes: list[str], affinity: dict[tuple[str, ...], dict[str, Any]],
           pods: list[Any]) -> list[ExcludeStep]:
    """The patch of a Kubeflow job's templates, then the deletes of its pods on the nodes (a launcher's left)."""
    ns, kind, name = ident
    body: dict[str, Any] = {}
    for path, wanted in affinity.items():
        _put(body, [*path, "spec", "affinity"], wanted)
    left = [p for p in pods if _launcher(kind, p)]
    what = f"patch {kind} {ns}/{name}: its pod templates keep off {', '.join(nodes)}" + "".join(
        f"; its launcher pod {p.metadata.name} on {p.spec.node_name} is left (the launcher's Job keeps the template "
        "it started with: cancel the job and send it again to move it)" for p in left)
    steps = [ExcludeStep(what, verb="patch", target=(("kind", kind), ("namespace", ns), ("name", name)), body=body)]
    return steps + [ExcludeStep(f"delete pod {ns}/{p.metadata.name} on {p.spec.node_name} (its operator makes it "
                                "again elsewhere)", verb="delete",
                                target=(("kind", "Pod"), ("namespace", ns), ("name", p.metadata.name),
                                        ("uid", p.metadata.uid or ""))) for p in pods if p not in left]


def _launcher(kind: str, pod: Any) -> bool:
    """An MPIJob's launcher pod: the MPI operator runs it under a batch Job of its own, made from the launcher
    template once, so a launcher pod deleted would come back where it was."""
    labels = pod.metadata.labels or {}
    return kind == "MPIJob" and (labels.get("training.kubeflow.org/job-role") == "launcher"
                                 or labels.get("gpuval.io/role") == "lead")


def _terms(template: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = ((template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return (affinity.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []


def _put(body: dict[str, Any], path: list[str], value: Any) -> None:
    for key in path[:-1]:
        body = body.setdefault(key, {})
    body[path[-1]] = value


def send_exclude(api: Any, exclusion: Exclusion) -> None:
    """Send the steps in order (the patch first: a pod made again must see it); the first the API server refuses is
    the exclusion's problem, and nothing after it is sent."""
    for step in exclusion.steps:
        obj = {"metadata": {"name": step.at("name"), "namespace": step.at("namespace"), "uid": step.at("uid")}}
        try:
            if step.verb == "patch":
                patch(api, step.at("kind"), obj, step.body or {})
            else:
                delete(api, step.at("kind"), obj)
        except GpuvalError as exc:
            exclusion.problem = f"{step.what}: {exc}"
            return
    exclusion.sent = True
