"""What the fleet check asks of each engine beyond running jobs (a Site): which nodes there are (a `--nodelist`
expanded once, within the caps of engines/nodes.py, or N picked), which switch each sits under, which cannot take a
job now, how a job is pinned to named nodes, what every job's environment holds so that `Engine.node_lines` can tie
each line to its node, and the engine's own syntax for an exclude list (what drains or taints a node is the
engine's: `Engine.node_client`). This module holds the base (local: this machine); each scheduler's site lives
with its engine (slurm/site.py, kubernetes/site.py), which hands it out (`Engine.site`).

- Slurm: nodes from a host list (--nodelist) or the first N idle nodes of `sinfo`; switches from `scontrol show
  topology` (TopologyPlugin=topology/tree; leaf switches, Level=0), NVL72 racks from its blocks (topology/block,
  Slurm 23.11+); each test is `sbatch --nodelist=... --exclusive`,
  its tasks labelled by srun (SLURM_LABELIO); the exclude list is a Slurm host list for `--exclude`.
- Kubernetes: nodes by name, or the first N Ready, schedulable nodes of the SKU's instance type; switches from a
  node label the user names (--switch-label; Kubernetes has no standard one), NVL72 racks likewise (--rack-label:
  GPU Feature Discovery's `nvidia.com/gpu.clique`, CoreWeave's `ds.coreweave.com/nvlink.domain`); each test's pods are pinned by node
  affinity (one pod per node); the exclude list is the node names.
- local: this machine, one node; nothing to drain.
- Azure ML: refused. A job there cannot name the nodes of a compute cluster, so no test can be placed on chosen
  nodes (docs/fleet.md says what to run instead).

A job pinned with `together=False` holds tests that are each their own (the node tests of a round): one that fails
never ends the others. `together=True` is one test over all the job's nodes (one all_reduce): one fate.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Mapping

from gpuval.engines.base import Engine
from gpuval.engines.nodes import node_list, this_node
from gpuval.engines.spec import Launcher
from gpuval.errors import UsageError


class Site:
    """The engine-specific part of a fleet check (this base: one machine, the local engine)."""

    launcher = Launcher.NONE
    read_width = 16  # job outputs read at once (files: cheap)
    switches = "one machine sits under no switch"  # where this site's switches come from (--switch-label refused)

    def __init__(self, engine: Engine[Any], switch_label: str | None = None, rack_label: str | None = None) -> None:
        if switch_label:
            raise UsageError(f"--switch-label names a Kubernetes node label; {self.switches}")
        if rack_label:
            raise UsageError("--rack-label names a Kubernetes node label; Slurm's racks come from its topology/block "
                             "blocks, and elsewhere from the NVLink domain each tray's fabric reports")
        self.engine = engine

    def expand(self, text: str) -> list[str]:
        """The nodes of a --nodelist value (its caps checked before anything is split or expanded)."""
        nodes = node_list(text)
        if nodes != [this_node()]:
            raise UsageError(f"--on local checks this machine only: --nodelist {this_node()} (got {text[:80]!r})")
        return nodes

    def pick(self, count: int) -> list[str]:
        """`count` nodes that can take a job now."""
        if count != 1:
            raise UsageError(f"--on local checks this machine only: --nodes 1 (got {count})")
        return [this_node()]

    def groups(self, nodes: list[str]) -> dict[str, str]:
        """node -> the switch it sits under, where the cluster says; {} for random pairing."""
        return {}

    rack_source = ""  # where `racks` comes from, for the findings' words

    def racks(self, nodes: list[str]) -> dict[str, str]:
        """node -> the NVL72 rack (NVLink domain) it is a tray of, where the cluster says; {}: the fleet check takes
        the NVLink domains the nodes' own fabric reports."""
        return {}

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        """node -> why it cannot take a job now (down, drained, cordoned, unknown)."""
        return {}

    def pin(self, nodes: tuple[str, ...], together: bool) -> dict[str, Any]:
        """The engine options that run a job on exactly `nodes`, whole nodes; `together`: its tasks are one test
        (one fails, the rest end), else each task is a test of its own and runs to its end whatever the others do."""
        return {}

    def job_env(self) -> dict[str, str]:
        """What every job of a check carries in its environment, so that the engine ties each line to its node."""
        return {}

    def retest_window(self, held: Mapping[str, str], partners: list[str],
                      name: str) -> AbstractContextManager[frozenset[str]]:
        """While open, the check's jobs may run on the nodes gpuval holds (`held`: node -> why it is held, as read)
        and on nobody else's jobs' way: it yields the held nodes it opened (one whose mark changed since it was
        read stays shut); on the way out, whatever happened, every one is held again as it was. `name` names what
        the scheduler keeps for it (a Slurm reservation)."""
        raise UsageError(f"the {self.engine.name} engine holds no node out of service: nothing to re-test "
                         "(slurm, kubernetes)")

    def close_window(self, name: str, held: Mapping[str, str]) -> list[str]:
        """Close the re-test window `name` that a stopped re-test left open (killed outright: its own way out never
        ran): hold each of its nodes again as it was (`held`: node -> its mark as the re-test read it, kept before it
        opened the window), then drop what the scheduler keeps for the window; one line per node held again (an
        EngineError when one cannot be: the window stays, for the next try). Nothing where the window never takes a
        mark off (the base)."""
        return []

    def exclude(self, nodes: list[str]) -> str:
        """`nodes` in the engine's own syntax for keeping jobs off them."""
        return ",".join(nodes)
