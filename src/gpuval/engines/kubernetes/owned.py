"""A job's own objects on Kubernetes, and the one rule for them: gpuval deletes only what it made, and says so by
its label (`gpuval.io/job: JOB` on every object of the job) and by owner references.

- `send` creates the job's objects in order (its ComputeDomain, Secret and topology ConfigMap, the indexed Job's
  Service, then the job itself). Once the job exists, each of the others gets an owner reference to it, so the API
  server's garbage collector deletes them with the job however the job goes (`gpuval jobs cancel`, `kubectl
  delete`, a TTL). A create the API refuses (a 422 from an admission webhook, a quota, a name clash) deletes what
  this send had created, so nothing of a job that never ran, its Secret least of all, stays behind; an owner
  reference it refuses deletes the job too (no job is left running whose Secret would outlive it).
- `cancel` deletes the job and the objects named after it (Service, `JOB-nccl-topology`, `JOB-env`,
  `JOB-compute-domain`) only where each carries gpuval's label for this job, each by the uid it was read with (a
  namesake made in between stays). A job gpuval did not make is refused whole; an object of someone else's under one
  of those names is left, and named.

The owner reference holds what the garbage collector needs: the job's apiVersion (batch/v1, kubeflow.org/v2beta1
for the MPI Operator's MPIJob, kubeflow.org/v1 for the training operator's PyTorchJob: a custom resource is an owner
like any other, in the same namespace), kind, name and uid. `controller` is false: the job's own controller (the Job
controller, the MPI or training operator) acts on what it controls, and these objects are gpuval's. So is
`blockOwnerDeletion`: deleting the job need not wait for them, and true would need the right to update the job's
finalizers wherever the OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift), a right that a user
who may create jobs need not have. A ComputeDomain deleted with its job keeps the DRA driver's finalizer until the
driver's controller has removed the domain's IMEX daemons and claim template (cmd/compute-domain-controller).
"""

from __future__ import annotations

from typing import Any

from gpuval.engines.kubernetes.client import created, delete, patch, read
from gpuval.engines.kubernetes.domain import domain_name
from gpuval.engines.kubernetes.manifests import LABEL, job_configmap, job_secret
from gpuval.errors import EngineError, GpuvalError, UsageError


def is_jobs(obj: dict[str, Any], job: str) -> bool:
    """Whether gpuval made `obj` for the job named `job` (its label says so)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL) == job


def owner_reference(job: dict[str, Any], uid: str) -> dict[str, Any]:
    """A reference to the job (its manifest, and the uid the API server gave it) for the objects it owns."""
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"], "uid": uid,
            "controller": False, "blockOwnerDeletion": False}


def send(api: Any, objects: list[dict[str, Any]]) -> None:
    """Create the job's objects in order, the job last, then make the job the owner of the others; on any refusal
    delete what this call created and raise the refusal (saying what could not be deleted)."""
    *others, job = objects
    made: list[tuple[str, dict[str, Any]]] = []  # (kind, the API's answer): what a refusal must undo
    try:
        for obj in others:
            made.append((obj["kind"], created(api, obj)))
        answer = created(api, job)
    except GpuvalError as exc:
        raise _undone(api, made, exc) from None
    if not made:
        return
    try:
        uid = (answer.get("metadata") or {}).get("uid")
        if not uid:
            raise EngineError(f"kubernetes create {job['kind']} {job['metadata']['name']}: the API server gave it "
                              "no uid, which its objects need to name it their owner")
        owner = owner_reference(job, uid)
        for kind, obj in made:
            patch(api, kind, obj, {"metadata": {"ownerReferences": [owner]}})
    except GpuvalError as exc:
        raise _undone(api, [*made, (job["kind"], answer)], exc) from None


def _undone(api: Any, made: list[tuple[str, dict[str, Any]]], cause: GpuvalError) -> GpuvalError:
    """Delete what a refused send created, the last first; returns the error to raise: `cause`, naming what could
    not be deleted."""
    kept = []
    for kind, obj in reversed(made):
        try:
            delete(api, kind, obj)
        except GpuvalError as exc:
            kept.append(f"{kind} {obj['metadata']['name']} ({exc})")
    if not kept:
        return cause
    return type(cause)(f"{cause}; and could not delete what it had created: {', '.join(kept)}")


def companions(kind: str, name: str) -> list[tuple[str, str]]:
    """The objects gpuval makes beside a job of `kind` named `name` (kind, name): what cancel may delete."""
    service = [("Service", name)] if kind == "Job" else []  # the indexed Job's headless Service
    return [*service, ("ConfigMap", job_configmap(name)), ("Secret", job_secret(name)),
            ("ComputeDomain", domain_name(name))]


def cancel(api: Any, namespace: str, kind: str, name: str) -> list[str]:
    """Delete the job and its companions that carry gpuval's label for it; returns the companions left (KIND
    NAME), which someone else made. A job without the label is a UsageError, and nothing is deleted."""
    job = read(api, kind, name, namespace)
    if job is None:
        raise EngineError(f"kubernetes {kind} {name}: no such object in namespace {namespace}")
    if not is_jobs(job, name):
        named = ", ".join(f"{k} {n}" for k, n in companions(kind, name))
        raise UsageError(f"kubernetes job {namespace}/{kind}/{name} was not made by gpuval (it has no {LABEL}={name} "
                         f"label): gpuval deletes only what it made, so the job and any {named} are left as they are")
    delete(api, kind, job)
    left = []
    for ckind, cname in companions(kind, name):
        obj = read(api, ckind, cname, namespace)
        if obj is None:
            continue  # a job without a ConfigMap or a Secret of its own has none
        if is_jobs(obj, name):
            delete(api, ckind, obj)
        else:
            left.append(f"{ckind} {cname}")
    return left
