"""What gpuval holds out of service, from the scheduler's own state (the node clients' census: Slurm's drain
reasons, Kubernetes' taint and annotations), each node with why (its fault codes and the suggested actions), since
when, the run that convicted it, where that run's evidence bundle is kept (on the node for its own `health --drain`;
where the fleet check ran for a fleet drain), and what lifts it: `gpuval nodes`.

What lifts a drain is node_state's rule: a pass that re-checked every code it stands for. A code a quick check
reads (ECC, Xid, ports) is re-checked by the node's next quick pass; a measured one (a slow GEMM, a slow
all_reduce) only by a full `gpuval health` that passes; a fleet code (FLEET_*) only `gpuval fleet retest`, which
repeats the tests that convicted the node with known-good partners and lifts it only when they pass; a reason that
lists fewer codes than it stands for (`+N`), or a code of no check, only a person."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from gpuval.engines.nodes import NodeClient
from gpuval.operate.brake import drained_by_gpuval
from gpuval.operate.codes import is_fleet_code
from gpuval.operate.evidence import FOLDER
from gpuval.operate.node_state import held_reason


@dataclass(frozen=True)
class Held:
    """One node gpuval holds: its codes, suggested actions, run, since when, its evidence and what lifts it."""

    node: str
    scheduler: str
    codes: list[str]
    actions: list[str]
    run_id: str
    since: datetime | None
    evidence: str
    lifts: str

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "scheduler": self.scheduler, "codes": self.codes, "actions": self.actions,
                "run_id": self.run_id, "since": self.since.isoformat() if self.since else None,
                "evidence": self.evidence, "lifts": self.lifts}


def what_lifts(codes: Sequence[str], complete: bool, quick_codes: set[str], health_codes: set[str]) -> str:
    """Which run lifts a drain standing for `codes` (`complete`: the reason lists every code it stands for)."""
    if not complete or not codes or any(c not in health_codes and not is_fleet_code(c) for c in codes):
        return "a person (scontrol update nodename=NODE state=resume; kubectl taint): gpuval cannot tell every code"
    if any(is_fleet_code(c) for c in codes):
        return ("`gpuval fleet retest --nodelist NODE` where its fleet check ran, when the re-test of what convicted "
                "it passes (with known-good partners): no health check re-checks a fleet code")
    if all(c in quick_codes for c in codes):
        return "the node's next quick check that passes (gpuval health --quick --drain), or a full one"
    return "a full gpuval health --drain on the node that passes (a quick check does not measure " + \
        " ".join(c for c in codes if c not in quick_codes) + ")"


def held_nodes(client: NodeClient, state_dir: Path, quick_codes: set[str], health_codes: set[str]) -> list[Held]:
    """Every node gpuval holds, read from the scheduler (`drained_by_gpuval`), with what lifts each; `state_dir`:
    the nodes' state directory (GPUVAL_STATE_DIR, the same on every node), where each bundle is kept on its node."""
    out = []
    for held in drained_by_gpuval(client).held:
        read = held_reason(held.why)
        codes, run = list(read.codes), read.run_id
        fleet = any(is_fleet_code(c) for c in codes)  # a fleet check keeps it where the check ran
        where = f"{state_dir / FOLDER / held.name / (run + '.yaml') if run else state_dir / FOLDER / held.name}" + \
            (" where the fleet check ran" if fleet else f" on {held.name}")
        out.append(Held(held.name, client.scheduler, codes, list(read.actions), run, held.since,
                        where, what_lifts(codes, not read.more, quick_codes, health_codes)))
    return out
