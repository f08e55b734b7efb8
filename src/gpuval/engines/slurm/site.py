"""The fleet check's view of Slurm (a Site): nodes from a host list or sinfo's idle nodes, leaf switches from the
topology, tests pinned with `sbatch --nodelist=... --exclusive` and `srun --kill-on-bad-exit`, the exclude list a
Slurm host list."""

from __future__ import annotations

from typing import Any

from gpuval.engines.site import Site
from gpuval.engines.slurm import nodes as slurm_nodes
from gpuval.engines.slurm.hostlist import compress, expand
from gpuval.errors import UsageError


class SlurmSite(Site):
    """Slurm: sinfo, scontrol, sbatch --nodelist."""

    scheduler = "slurm"

    def expand(self, text: str) -> list[str]:
        return expand(text)

    def pick(self, count: int) -> list[str]:
        partition = getattr(self.engine.options, "partition", None)
        idle = slurm_nodes.idle_nodes(partition)
        if len(idle) < count:
            raise UsageError(f"--nodes {count}: Slurm has {len(idle)} idle nodes"
                             + (f" in partition {partition}" if partition else "") + "; name them with --nodelist")
        return idle[:count]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        return slurm_nodes.leaf_switches(nodes)

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        return slurm_nodes.unavailable(nodes)

    def pin(self, nodes: tuple[str, ...]) -> dict[str, Any]:
        return {"nodelist": compress(nodes), "exclusive": True, "kill_on_bad_exit": True}

    def exclude(self, nodes: list[str]) -> str:
        return compress(nodes)
