"""Where jobs run: local, slurm, kubernetes, azureml. Each engine is one module behind `engines.base.Engine`."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gpuval.errors import UsageError

if TYPE_CHECKING:
    from gpuval.engines.base import Engine

# name -> "module:class"; modules import lazily so `gpuval --help` never loads kubernetes or azure.
_ENGINES = {
    "local": "gpuval.engines.local:LocalEngine",
    "slurm": "gpuval.engines.slurm:SlurmEngine",
    "kubernetes": "gpuval.engines.kubernetes:KubernetesEngine",
    "azureml": "gpuval.engines.azureml:AzureMLEngine",
}


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
