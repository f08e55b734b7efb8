"""kmock helpers shared by the engine, operate and fleet tests, and `ApiServer`: kmock's emulator with two things a
real API server does and gpuval relies on, which kmock 0.8 leaves out. Every kmock test gets it (tests/conftest.py's
`kmock_options`):

- each object created gets a `metadata.uid` (owner references name their owner by it), and the answer to a create
  is 201 Created (the official client reads a custom object only from a 201);
- a list with `labelSelector` answers only the objects whose labels match it (equality `k=v`, `k==v`, `k!=v`,
  existence `k`, `!k`, and the set forms `k in (a,b)`, `k notin (a,b)`; requirements joined by commas are ANDed,
  as the API server's labels.Parse reads them). kmock alone lists every object, so a wrong selector went unseen;
- a pod template whose node affinity has a node field selector (`matchFields`) with other than one value is refused
  with 422, as the API server's validation does (validateNodeFieldSelectorRequirement: "must be only one value when
  `operator` is 'In' or 'NotIn' for node field selector"); kmock took a pinned job of several nodes in one rule.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, Mapping

from kmock import KubernetesEmulator, action

_REQUIREMENT = re.compile(r"^\s*(?:(?P<absent>!)\s*(?P<key0>[\w./-]+)|(?P<key>[\w./-]+)\s*(?:(?P<op>==|=|!=)\s*"
                          r"(?P<value>[\w.-]*)|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*$")


def selected(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether `labels` match the label selector `selector` (a malformed one is a ValueError, as the server's 400)."""
    for requirement in re.split(r",(?![^()]*\))", selector):
        if not requirement.strip():
            continue
        found = _REQUIREMENT.match(requirement)
        if not found:
            raise ValueError(f"unable to parse requirement: {requirement!r}")
        if found["absent"]:
            ok = found["key0"] not in labels
        elif found["op"]:
            equal = labels.get(found["key"]) == found["value"]
            ok = equal if found["op"] != "!=" else not equal
        elif found["set"]:
            within = labels.get(found["key"]) in {v.strip() for v in found["values"].split(",")}
            ok = within if found["set"] == "in" else not within
        else:
            ok = found["key"] in labels
        if not ok:
            return False
    return True


def field_selector_problem(obj: Any) -> str:
    """What the API server's validation says of the node field selectors anywhere in `obj` ("" where none is
    wrong): each `matchFields` requirement with operator In or NotIn must have exactly one value."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            fields = node.get("matchFields")
            for req in fields if isinstance(fields, list) else []:
                named = len(req.get("values") or ()) if isinstance(req, dict) else 1
                if named != 1 and req.get("operator") in ("In", "NotIn"):
                    found.append(f"{path}.matchFields.values: Required value: must be only one value when `operator` "
                                 "is 'In' or 'NotIn' for node field selector")
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(obj, "")
    return "; ".join(found)


class ApiServer(KubernetesEmulator):
    """kmock's KubernetesEmulator that gives created objects a uid and honours label selectors on lists."""

    async def _handle(self, request: Any) -> Any:
        response = await super()._handle(request)
        if request.action == action.CREATE and response.status == 200 and not response.prepared:
            response.set_status(201)  # "Created", as the API server answers (the client reads a 200 as no object)
        return response

    async def _serve_create(self, request: Any) -> Any:
        bad = field_selector_problem(request.data)
        if bad:
            return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
                    "message": bad}
        await super()._serve_create(request)
        meta = request.data.get("metadata") or {}
        stored = self.objects[request.resource, request.namespace or meta.get("namespace"), meta.get("name")]
        stored.patch({"metadata": {"uid": str(uuid.uuid4())}})  # a new version: the request as sent stays as it was
        return stored.raw

    async def _serve_list(self, request: Any) -> Any:
        listed = await super()._serve_list(request)
        wanted = request.params.get("labelSelector")
        if wanted:
            listed["items"] = [obj for obj in listed["items"]
                               if selected(wanted, (obj.get("metadata") or {}).get("labels") or {})]
        return listed


def kubeconfig_for(server: Any, path: Path) -> Path:
    """A kubeconfig whose current context is the kmock emulator `server` (what load_kube_config reads in a CLI
    subprocess)."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "kmock",
              "clusters": [{"name": "kmock", "cluster": {"server": str(server.url).rstrip("/")}}],
              "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}],
              "users": [{"name": "u", "user": {"token": "t"}}]}
    path.write_text(json.dumps(config))
    return path


def enforce_resource_version(server: Any, resource: str, name: str) -> None:
    """Make kmock answer a PATCH of one object as a real API server does (kmock keeps no resourceVersion of its
    own): a patch whose metadata.resourceVersion is not the object's is refused with 409 and changes nothing; a
    patch without one, or with the current one, is applied and bumps the version. kmock merges every patch before
    a reaction runs, so the reaction puts back the last accepted object on a refusal."""
    import copy

    key = (resource, None, name)
    accepted = {"object": copy.deepcopy(server.objects[key].raw)}

    def react(request: Any) -> dict[str, Any]:
        kept = accepted["object"]
        sent = (request.data.get("metadata") or {}).get("resourceVersion")
        if sent is not None and sent != kept["metadata"]["resourceVersion"]:
            server.objects[key] = copy.deepcopy(kept)
            return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                    "message": f"the object has been modified (resourceVersion {sent}, now "
                               f"{kept['metadata']['resourceVersion']})"}
        now = copy.deepcopy(server.objects[key].raw)
        now["metadata"]["resourceVersion"] = str(int(kept["metadata"]["resourceVersion"]) + 1)
        server.objects[key] = now
        accepted["object"] = copy.deepcopy(now)
        return now

    path = f"/api/v1/{resource.split('/', 1)[1]}/{name}"
    server["patch", path, lambda request: (request.data.get("metadata") or {}).get("resourceVersion") not in (
        None, accepted["object"]["metadata"]["resourceVersion"])] << 409 << react
    server["patch", path] << react


def controlled_by(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The controller owner reference an operator puts on what it makes for `owner` (an object as read or created:
    its apiVersion, kind, name and uid), as the Job controller's and the Kubeflow operators' `NewControllerRef`."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def run_pod(api: Any, name: str, node: str, labels: Mapping[str, str], owner: Mapping[str, Any] | None,
            namespace: str = "gpu", container: str = "main", **status: str) -> None:
    """What an operator and the scheduler do (the official client's ApiClient `api`): the pod `name` (one container
    `container`) created with `labels`, controlled by `owner` (None: a pod nothing controls, as an orphan or a
    hand-made one), placed on `node` and running (`status`: more of its status, startTime say)."""
    from kubernetes import client

    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [controlled_by(owner)]
    core = client.CoreV1Api(api)
    spec = {"nodeName": node, "containers": [{"name": container, "image": "i"}]}
    core.create_namespaced_pod(namespace, {"metadata": meta, "spec": spec})
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Running", **status}})
