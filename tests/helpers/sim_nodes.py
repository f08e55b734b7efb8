"""A simulated Slurm node state for the simulated fleet (benchmarks/fleet_isolation.py's model, thousands of nodes):
no real slurmctld runs 4,096 nodes on this 2-core machine. It keeps what slurmctld keeps for a node (its state
flags, its reason, the reason's time to the second) and answers the two calls gpuval's node client makes, one
read-modify-write of a node and one census of the cluster, through the same policy and owner objects. The real
clients are tested against real Slurm daemons (tests/operate/test_brake_slurm.py) and kmock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gpuval.engines.nodes import Census, HeldNode, NodeClient, SlurmNode


@dataclass
class SimNodes(NodeClient):
    """`count` nodes named node00000... (or `names`), all idle; `clock` gives the time a reason is stamped with
    (seconds)."""

    count: int
    clock: Any = None
    states: dict[str, SlurmNode] = field(default_factory=dict)
    stamps: dict[str, datetime] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    names: tuple[str, ...] = ()
    scheduler = "slurm"

    def __post_init__(self) -> None:
        for name in self.names or [f"node{i:05d}" for i in range(self.count)]:
            self.states.setdefault(name, SlurmNode(name, "IDLE", ""))

    def now(self) -> datetime:
        seconds = self.clock() if self.clock else datetime.now(timezone.utc).timestamp()
        return datetime.fromtimestamp(int(seconds), timezone.utc)

    def drain(self, node: str, reason: str) -> None:
        """Drain as a person or another tool would (scontrol update state=drain reason=...)."""
        self.states[node] = SlurmNode(node, "IDLE+DRAIN", reason)
        self.stamps[node] = self.now()

    def edit(self, node: str, policy: Any) -> None:
        self.calls.append(f"edit {node}")
        change = policy.slurm(self.states[node])
        if change.action == "drain":
            self.drain(node, change.reason)
        elif change.action == "undrain":
            self.states[node] = SlurmNode(node, "IDLE", "")
            self.stamps.pop(node, None)

    def census(self, owner: Any) -> Census:
        self.calls.append("census")
        held = tuple(HeldNode(n, s.reason, self.stamps.get(n)) for n, s in self.states.items() if owner.slurm(s))
        return Census(len(self.states), held)

    @property
    def drained(self) -> list[str]:
        return [n for n, s in self.states.items() if s.drained]
