"""What the fleet check asks of each engine beyond running jobs (a Site): which nodes there are, which switch each
sits under, which cannot take a job now, how a job is pinned to named nodes, and the engine's own syntax for an
exclude list. This module holds the base (local: this machine); each scheduler's site lives with its engine
(slurm/site.py, kubernetes/site.py); `gpuval.engines.site_for` picks one.

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
from gpuval.errors import UsageError


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
