"""Where jobs run: local, slurm, kubernetes, azureml, each behind `engines.base.Engine` (Slurm and Kubernetes are
packages: everything that talks to that scheduler lives there), found by name in THE one table, `_ENGINES` (after
torchx's schedulers registry). The engine hands out the rest: the fleet check's view of it (`Engine.site`), the
client that drains or taints its nodes (`Engine.node_client`; `node_client` here for a caller that holds no engine:
`health --drain` on a node, `gpuval nodes`), and what tells a process that it runs on one of its nodes
(`Engine.NODE_VARIABLES`, `NODE_COMMAND`: `detect_scheduler`). Nothing here names a scheduler but the table."""

from __future__ import annotations

import os
import shutil
from importlib import import_module
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from gpuval.errors import UsageError

if TYPE_CHECKING:
    from gpuval.engines.base import Engine
    from gpuval.engines.nodes import NodeClient

# name -> "module:class"; modules import lazily so `gpuval --help` never loads kubernetes or azure.
_ENGINES = {
    "local": "gpuval.engines.local:LocalEngine",
    "slurm": "gpuval.engines.slurm.engine:SlurmEngine",
    "kubernetes": "gpuval.engines.kubernetes.engine:KubernetesEngine",
    "azureml": "gpuval.engines.azureml:AzureMLEngine",
}


def engine_names() -> tuple[str, ...]:
    """Every engine's name, in the table's order."""
    return tuple(_ENGINES)


def engine_class(name: str) -> "type[Engine[Any]]":
    """The Engine class of a name; an unknown name is a one-line error."""
    target = _ENGINES.get(name)
    if target is None:
        raise UsageError(f"unknown engine {name!r}; choose one of: {', '.join(_ENGINES)}")
    module, cls = target.split(":")
    return getattr(import_module(module), cls)


def get_engine(name: str, options: dict[str, Any] | None = None) -> "Engine[Any]":
    """An engine instance with its options (`--opt KEY=VALUE` values)."""
    return engine_class(name)(options)


def _has_nodes(cls: "type[Engine[Any]]") -> bool:
    """Whether the engine says how a process knows it runs on one of its nodes: a scheduler with nodes of its own."""
    return bool(cls.NODE_VARIABLES or cls.NODE_COMMAND)


def _schedulers() -> "Iterator[type[Engine[Any]]]":
    """The engine classes with nodes of their own, in the table's order (each module imported only when reached)."""
    return (cls for name in _ENGINES for cls in [engine_class(name)] if _has_nodes(cls))


def scheduler_names() -> list[str]:
    """The engines with nodes of their own: the names `--scheduler` and `gpuval nodes --on` take."""
    return [cls.name for cls in _schedulers()]


def detect_scheduler(env: Mapping[str, str] | None = None) -> str:
    """The scheduler this process runs under: the first engine one of whose NODE_VARIABLES is set (slurm under
    slurmd or in a Slurm job, kubernetes in a pod), else the first whose NODE_COMMAND is installed (slurm where
    scontrol is); none is a one-line error that says what was looked for."""
    env = os.environ if env is None else env
    found = next((cls.name for cls in _schedulers() if any(env.get(v) for v in cls.NODE_VARIABLES)), None)
    path = env.get("PATH", os.defpath)
    found = found or next((cls.name for cls in _schedulers()
                           if cls.NODE_COMMAND and shutil.which(cls.NODE_COMMAND, path=path)), None)
    if found is None:
        variables = ", ".join(v for cls in _schedulers() for v in cls.NODE_VARIABLES)
        commands = ", ".join(cls.NODE_COMMAND for cls in _schedulers() if cls.NODE_COMMAND)
        raise UsageError(f"no scheduler here (none of {variables} is set, no {commands} on PATH): name one on the "
                         f"command line ({' or '.join(scheduler_names())})")
    return found


def node_client(scheduler: str | None = None, options: dict[str, Any] | None = None) -> "NodeClient":
    """The client that drains or taints a node of `scheduler` [default: the one this runs under, `detect_scheduler`],
    made by that engine with its `options` (kubernetes: `context`; kubeconfig, else in-cluster). A name that is no
    engine with nodes of its own (pbs, local) is a one-line error."""
    name = detect_scheduler() if scheduler is None else scheduler
    if name not in _ENGINES or not _has_nodes(engine_class(name)):
        raise UsageError(f"unknown scheduler {name!r}: use {' or '.join(scheduler_names())}")
    return get_engine(name, options).node_client()
