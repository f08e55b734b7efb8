"""What the fleet check asks of each engine beyond running jobs: which nodes there are, which switch each sits
under, which cannot take a job now, how a job is pinned to named nodes, and the engine's own syntax for an
exclude list.

- Slurm: nodes from a host list (--nodelist) or the first N idle nodes of `sinfo`; switches from `scontrol show
  topology` (TopologyPlugin=topology/tree; leaf switches, Level=0); each test is `sbatch --nodelist=... --exclusive`
  with `srun --kill-on-bad-exit`; the exclude list is a Slurm host list for `--exclude`.
- Kubernetes: nodes by name, or the first N Ready, schedulable nodes of the SKU's instance type; switches from a
  node label the user names (--switch-label; Kubernetes has no standard one); each test's pods are pinned by node
  affinity (one pod per node); the exclude list is the node names.
- local: this machine, one node.
- Azure ML: refused. A job there cannot name the nodes of a compute cluster, so no test can be placed on chosen
  nodes (docs/fleet.md says what to run instead).
"""

from __future__ import annotations

from typing import Any

from gpuval.engines.base import Engine
from gpuval.engines.spec import Launcher
from gpuval.errors import EngineError, UsageError
from gpuval.workloads.fleet.hostlist import compress, expand

AZUREML_REFUSAL = (
    "gpuval fleet check cannot run on Azure ML: every test runs on named nodes, and an Azure ML job cannot name "
    "the nodes of its compute. On an AmlCompute cluster run `gpuval submit nccl --on azureml --nodes N` for the "
    "full-scale figure; on an attached AKS compute run `gpuval fleet check --on kubernetes` against that cluster "
    "(docs/fleet.md)")
# Slurm node states (sinfo %T, any flag) in which a node takes no job now.
_UNAVAILABLE = ("down", "drain", "fail", "maint", "future", "unknown", "inval", "not_responding", "reboot")


class Site:
    """The engine-specific part of a fleet check (this base: one machine, the local engine)."""

    launcher = Launcher.NONE
    scheduler: str | None = None  # what `--drain` acts through (operate.node_state), None: nothing to drain
    read_width = 16  # job outputs read at once (files: cheap)

    def __init__(self, engine: Engine[Any]) -> None:
        self.engine = engine

    def expand(self, text: str) -> list[str]:
        """The nodes of a --nodelist value."""
        from gpuval.node.host import hostname

        nodes = [n.strip() for n in text.split(",") if n.strip()]
        if nodes != [hostname()]:
            raise UsageError(f"--on local checks this machine only: --nodelist {hostname()} (got {text!r})")
        return nodes

    def pick(self, count: int) -> list[str]:
        """`count` nodes that can take a job now."""
        from gpuval.node.host import hostname

        if count != 1:
            raise UsageError(f"--on local checks this machine only: --nodes 1 (got {count})")
        return [hostname()]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        """node -> the switch it sits under, where the cluster says; {} for random pairing."""
        return {}

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        """node -> why it cannot take a job now (down, drained, cordoned, unknown)."""
        return {}

    def pin(self, nodes: tuple[str, ...]) -> dict[str, Any]:
        """The engine options that run a job on exactly `nodes`, whole nodes."""
        return {}

    def exclude(self, nodes: list[str]) -> str:
        """`nodes` in the engine's own syntax for keeping jobs off them."""
        return ",".join(nodes)


class SlurmSite(Site):
    """Slurm: sinfo, scontrol, sbatch --nodelist."""

    scheduler = "slurm"

    def _run(self, argv: list[str]) -> str:
        from gpuval.engines.slurm_status import first_line, run

        proc = run(argv)
        if proc.returncode != 0:
            raise EngineError(f"{' '.join(argv[:3])}: {first_line(proc.stderr) or proc.returncode}")
        return proc.stdout

    def expand(self, text: str) -> list[str]:
        return expand(text)

    def pick(self, count: int) -> list[str]:
        partition = getattr(self.engine.options, "partition", None)
        where = ["-p", partition] if partition else []
        idle = list(dict.fromkeys(self._run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N", *where]).split()))
        if len(idle) < count:
            raise UsageError(f"--nodes {count}: Slurm has {len(idle)} idle nodes"
                             + (f" in partition {partition}" if partition else "") + "; name them with --nodelist")
        return idle[:count]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        from gpuval.engines.slurm_status import run

        proc = run(["scontrol", "show", "topology"])
        wanted = set(nodes)
        found: dict[str, str] = {}
        for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
            fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            if fields.get("Level") == "0" and fields.get("SwitchName") and fields.get("Nodes"):
                for node in expand(fields["Nodes"]):
                    if node in wanted:
                        found[node] = fields["SwitchName"]
        return found

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        out = self._run(["sinfo", "-h", "-N", "-n", compress(nodes), "-o", "%N %T"])
        states: dict[str, str] = {}
        for line in out.splitlines():
            name, _, state = line.strip().partition(" ")
            states[name] = state.strip().lower()
        why = {n: "not known to Slurm" for n in nodes if n not in states}
        wanted = set(nodes)
        for node, state in states.items():
            if node in wanted and any(word in state for word in _UNAVAILABLE):
                why[node] = f"Slurm state {state}"
        return why

    def pin(self, nodes: tuple[str, ...]) -> dict[str, Any]:
        return {"nodelist": compress(nodes), "exclusive": True, "kill_on_bad_exit": True}

    def exclude(self, nodes: list[str]) -> str:
        return compress(nodes)


class KubernetesSite(Site):
    """Kubernetes: the nodes API, node labels, node affinity."""

    launcher = Launcher.TORCHRUN
    scheduler = "kubernetes"
    read_width = 4  # each read fetches its pods' logs 16 at a time already (engines/kubernetes.py)

    def __init__(self, engine: Engine[Any], sku: str | None = None, switch_label: str | None = None) -> None:
        super().__init__(engine)
        self.sku, self.switch_label = sku, switch_label
        self._nodes: dict[str, Any] | None = None

    def _list(self) -> dict[str, Any]:
        if self._nodes is None:
            from kubernetes import client

            from gpuval.operate.kube import call

            api = client.CoreV1Api(self.engine.client())  # type: ignore[attr-defined]
            items = call("list nodes", api.list_node).items
            self._nodes = {n.metadata.name: n for n in items}
        return self._nodes

    def expand(self, text: str) -> list[str]:
        return list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))

    def _why_not(self, node: Any) -> str:
        spec, status = node.spec, node.status
        ready = next((c.status for c in (status.conditions or []) if c.type == "Ready"), "Unknown") if status else "?"
        if ready != "True":
            return f"not Ready ({ready})"
        if spec is not None and spec.unschedulable:
            return "cordoned (unschedulable)"
        from gpuval.operate.kube_node import TAINT_KEY

        if spec is not None and any(t.key == TAINT_KEY for t in spec.taints or []):
            return f"tainted {TAINT_KEY} by an earlier gpuval run"
        return ""

    def pick(self, count: int) -> list[str]:
        label = "node.kubernetes.io/instance-type"
        nodes = [name for name, node in sorted(self._list().items())
                 if not self._why_not(node) and (not self.sku or (node.metadata.labels or {}).get(label) == self.sku)]
        if len(nodes) < count:
            kind = f" of instance type {self.sku}" if self.sku else ""
            raise UsageError(f"--nodes {count}: the cluster has {len(nodes)} Ready, schedulable nodes{kind}; "
                             "name them with --nodelist")
        return nodes[:count]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        if not self.switch_label:
            return {}
        known = self._list()
        return {n: (known[n].metadata.labels or {})[self.switch_label] for n in nodes
                if n in known and self.switch_label in (known[n].metadata.labels or {})}

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        known = self._list()
        why = {n: "no such node" for n in nodes if n not in known}
        why.update({n: reason for n in nodes if n in known and (reason := self._why_not(known[n]))})
        return why

    def pin(self, nodes: tuple[str, ...]) -> dict[str, Any]:
        return {"nodes": list(nodes)}


def site_for(engine: Engine[Any], sku: str | None = None, switch_label: str | None = None) -> Site:
    """The fleet's view of an engine; Azure ML is refused with what to run instead."""
    if switch_label and engine.name != "kubernetes":
        raise UsageError("--switch-label names a Kubernetes node label; Slurm's switches come from its topology")
    if engine.name == "slurm":
        return SlurmSite(engine)
    if engine.name == "kubernetes":
        return KubernetesSite(engine, sku, switch_label)
    if engine.name == "local":
        return Site(engine)
    raise UsageError(AZUREML_REFUSAL)
