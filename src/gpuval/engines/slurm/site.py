"""The fleet check's view of Slurm (a Site): nodes from a host list or sinfo's idle nodes, leaf switches from the
topology, tests pinned with `sbatch --nodelist=... --exclusive` (`srun --kill-on-bad-exit` only where the job is one
test over all its nodes), every line labelled by srun (labels.py), drains through scontrol, the exclude list a
Slurm host list."""

from __future__ import annotations

from typing import Any

from gpuval.engines.nodes import NodeClient
from gpuval.engines.site import Site
from gpuval.engines.slurm import nodes as slurm_nodes
from gpuval.engines.slurm.hostlist import compress, expand
from gpuval.engines.slurm.labels import LABEL_ENV
from gpuval.errors import UsageError


class SlurmSite(Site):
    """Slurm: sinfo, scontrol, sbatch --nodelist."""

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

    def pin(self, nodes: tuple[str, ...], together: bool) -> dict[str, Any]:
        # Independent tests in one job must not share a fate: with --kill-on-bad-exit one node's failing test
        # would end every other node's test, and each of those would look like a crash of its own node.
        return {"nodelist": compress(nodes), "exclusive": True, "kill_on_bad_exit": together}

    def job_env(self) -> dict[str, str]:
        return dict(LABEL_ENV)  # srun labels every line with its task: node_lines ties each line to its node

    def node_client(self) -> NodeClient:
        return slurm_nodes.SlurmNodes()

    def exclude(self, nodes: list[str]) -> str:
        return compress(nodes)
