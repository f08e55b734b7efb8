"""The fleet check's view of Kubernetes (a Site): nodes by name, or the first N Ready, schedulable nodes of the
SKU's instance type; switches and NVL72 racks from node labels the user names (--switch-label, --rack-label:
Kubernetes has no standard one);
each test's pods pinned by node affinity (one pod per node); each line read from its pod, tied to the pod's node
(KubernetesEngine.node_lines); the nodes listed through the engine's own client (`connect`: a check and its jobs
see one cluster); the exclude list is the node names. KubernetesEngine.site hands it out."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from gpuval.engines.base import Engine
from gpuval.engines.kubernetes.nodes import list_nodes, why_unschedulable
from gpuval.engines.nodes import node_list, own_taint
from gpuval.engines.site import Site
from gpuval.engines.spec import Launcher
from gpuval.errors import UsageError

INSTANCE_TYPE = "node.kubernetes.io/instance-type"


class KubernetesSite(Site):
    """Kubernetes: the nodes API, node labels, node affinity."""

    launcher = Launcher.TORCHRUN
    read_width = 4  # each read fetches its pods' logs 16 at a time already (kubernetes/engine.py)

    def __init__(self, engine: Engine[Any], connect: Callable[[], Any], sku: str | None = None,
                 switch_label: str | None = None, rack_label: str | None = None) -> None:
        """`connect`: the ApiClient of `engine` (KubernetesEngine.client)."""
        super().__init__(engine)
        self.connect, self.sku, self.switch_label, self.rack_label = connect, sku, switch_label, rack_label
        self.rack_source = f"the node label {rack_label}" if rack_label else ""
        self._nodes: dict[str, Any] | None = None
        self.admitted: frozenset[str] = frozenset()  # held nodes a re-test's pods may run on (retest_window)

    def _list(self) -> dict[str, Any]:
        if self._nodes is None:  # one list call per check: every question below reads it
            self._nodes = list_nodes(self.connect())
        return self._nodes

    def expand(self, text: str) -> list[str]:
        return node_list(text)

    def pick(self, count: int) -> list[str]:
        nodes = [name for name, node in sorted(self._list().items())
                 if not why_unschedulable(node)
                 and (not self.sku or (node.metadata.labels or {}).get(INSTANCE_TYPE) == self.sku)]
        if len(nodes) < count:
            kind = f" of instance type {self.sku}" if self.sku else ""
            raise UsageError(f"--nodes {count}: the cluster has {len(nodes)} Ready, schedulable nodes{kind}; "
                             "name them with --nodelist")
        return nodes[:count]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        return self._labelled(nodes, self.switch_label)

    def racks(self, nodes: list[str]) -> dict[str, str]:
        return self._labelled(nodes, self.rack_label)

    def _labelled(self, nodes: list[str], label: str | None) -> dict[str, str]:
        """node -> the value of its node label `label` (nodes without it left out); {} without a label."""
        if not label:
            return {}
        known = self._list()
        return {n: (known[n].metadata.labels or {})[label] for n in nodes
                if n in known and label in (known[n].metadata.labels or {})}

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        known = self._list()
        why = {n: "no such node" for n in nodes if n not in known}
        why.update({n: reason for n in nodes
                    if n in known and (reason := why_unschedulable(known[n], tainted_ok=n in self.admitted))})
        return why

    def pin(self, nodes: tuple[str, ...], together: bool) -> dict[str, Any]:
        if not self.admitted.intersection(nodes):
            return {"nodes": list(nodes), "fail_alone": not together}
        # Pods pinned to a held node tolerate gpuval's taint (and, as by default, the GPU taint): only the re-test's
        # own pods, pinned by node affinity, ever land on it.
        tolerate = [{**own_taint(), "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists",
                                                            "effect": "NoSchedule"}]
        return {"nodes": list(nodes), "fail_alone": not together, "tolerations": tolerate}

    @contextmanager
    def retest_window(self, held: Mapping[str, str], partners: list[str], name: str) -> Iterator[frozenset[str]]:
        """The held nodes keep gpuval's taint; the re-test's pods tolerate it (`pin`)."""
        self.admitted = frozenset(held)
        try:
            yield self.admitted
        finally:
            self.admitted = frozenset()
