"""Where jobs run: local, slurm, kubernetes, azureml, each behind `engines.base.Engine` (Slurm and Kubernetes are
packages: everything that talks to that scheduler lives there); the fleet check's view of each (`site_for`); and the
client that changes a node's state in each scheduler (`node_client`)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gpuval.engines.nodes import check_scheduler
from gpuval.errors import UsageError

if TYPE_CHECKING:
    from gpuval.engines.base import Engine
    from gpuval.engines.nodes import NodeClient
    from gpuval.engines.site import Site

# name -> "module:class"; modules import lazily so `gpuval --help` never loads kubernetes or azure.
_ENGINES = {
    "local": "gpuval.engines.local:LocalEngine",
    "slurm": "gpuval.engines.slurm.engine:SlurmEngine",
    "kubernetes": "gpuval.engines.kubernetes.engine:KubernetesEngine",
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


AZUREML_REFUSAL = (
    "gpuval fleet check cannot run on Azure ML: every test runs on named nodes, and an Azure ML job cannot name "
    "the nodes of its compute. On an AmlCompute cluster run `gpuval submit nccl --on azureml --nodes N` for the "
    "full-scale figure; on an attached AKS compute run `gpuval fleet check --on kubernetes` against that cluster "
    "(docs/fleet.md)")


def site_for(engine: "Engine[Any]", sku: str | None = None, switch_label: str | None = None,
             rack_label: str | None = None) -> "Site":
    """The fleet check's view of an engine; Azure ML is refused with what to run instead."""
    if switch_label and engine.name != "kubernetes":
        raise UsageError("--switch-label names a Kubernetes node label; Slurm's switches come from its topology")
    if rack_label and engine.name != "kubernetes":
        raise UsageError("--rack-label names a Kubernetes node label; Slurm's racks come from its topology/block "
                         "blocks, and elsewhere from the NVLink domain each tray's fabric reports")
    if engine.name == "slurm":
        from gpuval.engines.slurm.site import SlurmSite

        return SlurmSite(engine)
    if engine.name == "kubernetes":
        from gpuval.engines.kubernetes.site import KubernetesSite

        return KubernetesSite(engine, sku, switch_label, rack_label)
    if engine.name == "local":
        from gpuval.engines.site import Site

        return Site(engine)
    raise UsageError(AZUREML_REFUSAL)


def node_client(scheduler: str | None = None, scontrol: str = "scontrol", api_client: Any = None) -> "NodeClient":
    """The client that drains or taints a node of `scheduler` [default: the one found here], slurm through
    `scontrol` (its full path where PATH is not set), kubernetes through `api_client` [default: kubeconfig, else
    in-cluster]; an unknown name is a one-line error."""
    if check_scheduler(scheduler) == "slurm":
        from gpuval.engines.slurm.nodes import SlurmNodes

        return SlurmNodes(scontrol)
    from gpuval.engines.kubernetes.nodes import KubernetesNodes

    return KubernetesNodes(lambda: api_client)
