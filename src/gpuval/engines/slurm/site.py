"""The fleet check's view of Slurm (a Site): nodes from a host list or sinfo's idle nodes, leaf switches and NVL72
racks (topology/block blocks) from the topology, tests pinned with `sbatch --nodelist=... --exclusive` (`srun
--kill-on-bad-exit` only where the job is one test over all its nodes), every line labelled by srun (labels.py), the
exclude list a Slurm host list. SlurmEngine.site hands it out."""

from __future__ import annotations

import getpass
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from gpuval.engines.site import Site
from gpuval.engines.slurm import nodes as slurm_nodes
from gpuval.engines.slurm.hostlist import compress, expand
from gpuval.engines.slurm.labels import LABEL_ENV
from gpuval.errors import EngineError, GpuvalError, UsageError


class SlurmSite(Site):
    """Slurm: sinfo, scontrol, sbatch --nodelist."""

    switches = "Slurm's switches come from its topology"
    rack_source = "Slurm's topology/block blocks"

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

    def racks(self, nodes: list[str]) -> dict[str, str]:
        return slurm_nodes.blocks(nodes)

    def unavailable(self, nodes: list[str]) -> dict[str, str]:
        return slurm_nodes.unavailable(nodes)

    reservation: str | None = None  # the re-test window's reservation, while one is open

    def pin(self, nodes: tuple[str, ...], together: bool) -> dict[str, Any]:
        # Independent tests in one job must not share a fate: with --kill-on-bad-exit one node's failing test
        # would end every other node's test, and each of those would look like a crash of its own node.
        window = {"reservation": self.reservation} if self.reservation else {}
        return {"nodelist": compress(nodes), "exclusive": True, "kill_on_bad_exit": together, **window}

    @contextmanager
    def retest_window(self, held: Mapping[str, str], partners: list[str], name: str) -> Iterator[frozenset[str]]:
        """A reservation `name` of the held nodes and their partners for this user; each held node whose drain is
        still the reason read (`held`: node -> reason) is lifted into it and yielded: Slurm 22.05 starts no job on a
        drained node, a reservation's jobs included (MAINT, IGNORE_JOBS, FLEX, OVERLAP: none lets one in), so the
        drain comes off while the reservation keeps everyone else's jobs away, and the same update notes the window
        and the reason in the node's comment (engines.nodes.WindowMark): every census (the drain brake's, `gpuval
        nodes`) still counts the node as gpuval's, from any host. On the way out, whatever happened, each is drained
        again with its reason and its comment put back (a pass is lifted afterwards, through the policy), then its
        jobs are cancelled (a re-test stopped while it sent them) and the reservation is deleted; a node that could
        not be drained again keeps the reservation, so it takes no job.
        A process killed outright runs no way out: `close_window` is the next re-test's."""
        slurm_nodes.reserve(name, [*held, *partners], getpass.getuser())
        self.reservation, opened = name, []
        try:
            for node, reason in held.items():
                if slurm_nodes.reopen(node, reason, name):
                    opened.append(node)
            yield frozenset(opened)
        finally:
            self.reservation = None
            stuck = []
            for node in opened:
                try:
                    slurm_nodes.redrain(node, held[node], name)
                except GpuvalError as exc:
                    stuck.append(f"{node} ({exc})")
            if stuck:
                raise EngineError(f"could not drain again after the re-test: {', '.join(stuck)}; reservation {name} "
                                  "is kept so that they take no job: drain them, then scontrol delete "
                                  f"reservationname={name}")
            slurm_nodes.cancel_reserved(name)  # its jobs are this re-test's: none left when it was stopped sending
            slurm_nodes.unreserve(name)

    def close_window(self, name: str, held: Mapping[str, str]) -> list[str]:
        # Its reservation gone (deleted on its way out, or by a person), only a node still noted as lifted by it is
        # drained again: any other was drained again, or lifted by someone, since.
        reserved = slurm_nodes.reserved(name)
        if reserved:
            slurm_nodes.cancel_reserved(name)  # the stopped re-test's jobs, queued or running in its window
        done, stuck = [], []
        for node, reason in held.items():
            try:
                if slurm_nodes.redrain(node, reason, name, noted_only=not reserved):
                    done.append(f"{node} drained again ({reason!r}): a stopped re-test left it lifted in {name}")
            except GpuvalError as exc:
                stuck.append(f"{node} ({exc})")
        if stuck:
            kept = (f"reservation {name} is kept so that they take no job: drain them, then scontrol delete "
                    f"reservationname={name}") if reserved else "its reservation is gone: drain them by hand"
            raise EngineError("; ".join([*done, f"could not drain again {', '.join(stuck)}: {kept}"]))
        if not reserved:
            return done
        slurm_nodes.unreserve(name)
        return [*done, f"reservation {name} of a stopped re-test deleted"]

    def job_env(self) -> dict[str, str]:
        return dict(LABEL_ENV)  # srun labels every line with its task: node_lines ties each line to its node

    def exclude(self, nodes: list[str]) -> str:
        return compress(nodes)
