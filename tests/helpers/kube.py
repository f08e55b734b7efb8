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
