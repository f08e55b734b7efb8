"""kmock helpers shared by the engine, operate and fleet tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
