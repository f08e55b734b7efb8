"""What gpuval holds out of service, from the scheduler's own state (the node clients' census: Slurm's drain
reasons and its re-test windows' notes, Kubernetes' taint and annotations), each node with why (its fault codes and
the suggested actions), since when, the run that convicted it, where that run's evidence bundle is kept (on the node
for its own `health --drain`; where the fleet check ran for a fleet drain: shown only where it is here), and what
lifts it: `gpuval nodes`.

What lifts a drain is node_state's rule: a pass that re-checked every code it stands for. A code a quick check
reads (ECC, Xid, ports) is re-checked by the node's next quick pass; a measured one (a slow GEMM, a slow
all_reduce) only by a full `gpuval health` that passes; a fleet code (FLEET_*) only `gpuval fleet retest`, which
repeats the tests that convicted the node with known-good partners (as its bundle kept them: with no bundle here, a
person) and lifts it only when they pass; a reason that lists fewer codes than it stands for (`+N`), or a code of no
check, only a person. A node lifted into a re-test window is held all the same: that re-test decides it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from gpuval.engines.nodes import WINDOW_PREFIX, NodeClient
from gpuval.errors import GpuvalError
from gpuval.operate.brake import drained_by_gpuval
from gpuval.operate.codes import is_fleet_code
from gpuval.operate.evidence import FOLDER, retest_settings
from gpuval.operate.node_state import held_reason

PERSON = "a person (scontrol update nodename=NODE state=resume; kubectl taint)"


@dataclass(frozen=True)
class Held:
    """One node gpuval holds, as the census read it: its mark as the scheduler shows it (`why`: a Slurm drain reason,
    a Kubernetes taint's codes), the codes it stands for (`complete`: the mark lists every one), the suggested
    actions, the run that convicted it (none for a taint: a Kubernetes annotation keeps no run id) and since when.
    What `gpuval nodes` shows of it and what `gpuval fleet retest` re-tests. `window`: the re-test window it is
    lifted into (Slurm; `since` is then when it was), "" when its drain or taint holds it."""

    node: str
    scheduler: str
    why: str
    codes: tuple[str, ...]
    actions: tuple[str, ...]
    run_id: str
    since: datetime | None
    complete: bool = True
    window: str = ""

    @property
    def by_fleet(self) -> bool:
        """A fleet check convicted it (a fleet code among its codes): its bundle is where the check ran, and only
        `gpuval fleet retest` re-checks it."""
        return any(is_fleet_code(c) for c in self.codes)

    def evidence(self, state_dir: Path) -> tuple[str, bool]:
        """(where its evidence bundle is kept, whether it is here for `gpuval fleet retest`): on the node for its
        own `health --drain` (not looked for from here); for a fleet drain, the bundle in this host's state folder
        that keeps the tests that convicted it (a taint names no run: the node's newest), or why there is none."""
        folder = state_dir / FOLDER / self.node
        path = folder / f"{self.run_id}.yaml" if self.run_id else folder
        if not self.by_fleet:
            return f"{path} on {self.node}", False
        try:
            found = retest_settings(state_dir, self.node, self.run_id or None)
        except GpuvalError as exc:
            return f"unreadable here: {exc}", False
        if found:
            return f"{found[0]} where the fleet check ran", True
        return (f"none here (no bundle in {path} keeps the tests that convicted it): where the fleet check ran on "
                "another host or with another GPUVAL_STATE_DIR, it is there; else it was never written (the drain "
                "said why)"), False

    def to_json(self, state_dir: Path, quick_codes: set[str], health_codes: set[str]) -> dict[str, Any]:
        """`gpuval nodes --json`'s row: the node, its codes, actions, run, since, re-test window, evidence and what
        lifts it."""
        evidence, here = self.evidence(state_dir)
        lifts = what_lifts(self.codes, self.complete, quick_codes, health_codes, here)
        return {"node": self.node, "scheduler": self.scheduler, "codes": list(self.codes),
                "actions": list(self.actions), "run_id": self.run_id,
                "since": self.since.isoformat() if self.since else None, "window": self.window or None,
                "evidence": evidence, "lifts": self.in_window() if self.window else lifts}

    def in_window(self) -> str:
        """What a node lifted into a re-test window is waiting on, and what closes a window its re-test left."""
        since = f" since {self.since:%Y-%m-%d %H:%M:%S %Z}" if self.since else ""
        return (f"in re-test window {self.window}{since}: its drain lifted into that reservation while `gpuval fleet "
                f"retest` run {self.window.removeprefix(WINDOW_PREFIX)} re-tests it, held all the same; that re-test "
                "drains it again as it ends and lifts it only if it passed; one stopped outright leaves it there, "
                "and the next `gpuval fleet retest` where it ran closes the window (drains it again with its reason, "
                "deletes the reservation) and re-tests it")


def what_lifts(codes: Sequence[str], complete: bool, quick_codes: set[str], health_codes: set[str],
               bundled: bool = True) -> str:
    """Which run lifts a drain standing for `codes` (`complete`: the reason lists every code it stands for;
    `bundled`: a fleet conviction's bundle is here, keeping the tests `gpuval fleet retest` repeats)."""
    if not complete or not codes or any(c not in health_codes and not is_fleet_code(c) for c in codes):
        return f"{PERSON}: gpuval cannot tell every code"
    if any(is_fleet_code(c) for c in codes) and not bundled:
        return (f"{PERSON}: no evidence bundle of its conviction here keeps the tests that convicted it, so no "
                "`gpuval fleet retest` here can repeat them (no health check re-checks a fleet code)")
    if any(is_fleet_code(c) for c in codes):
        return ("`gpuval fleet retest --nodelist NODE` where its fleet check ran, when the re-test of what convicted "
                "it passes (with known-good partners): no health check re-checks a fleet code")
    if all(c in quick_codes for c in codes):
        return "the node's next quick check that passes (gpuval health --quick --drain), or a full one"
    return "a full gpuval health --drain on the node that passes (a quick check does not measure " + \
        " ".join(c for c in codes if c not in quick_codes) + ")"


def held_nodes(client: NodeClient) -> list[Held]:
    """Every node gpuval holds, read from the scheduler in one call (`drained_by_gpuval`), each with its mark read
    (node_state.held_reason); those lifted into a re-test window too."""
    out = []
    for held in drained_by_gpuval(client).held:
        read = held_reason(held.why)
        out.append(Held(held.name, client.scheduler, held.why, read.codes, read.actions, read.run_id, held.since,
                        not read.more, held.window))
    return out
