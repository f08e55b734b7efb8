"""The fleet planner: the next round from what the last rounds showed. Pure: same state, same round.

The rounds, in order (each round holds every kind of work that is due, on disjoint nodes):
- round 0: every node's health suite and in-node all_reduce at once;
- node suites to re-run (a crash or an in-node figure under the fleet gets a second run before any verdict);
- link confirmations: a pair that failed while both its ends were since cleared runs once more;
- suspects, each with a known-good partner it has not had (same switch first), and nodes still waiting for
  their first pair (with known-good partners once there are any, else among themselves);
- the screening pairs (round 1: inside switches first, or random), and, once, the cross-switch pairs of every
  cleared node that is free, so a bad uplink shows;
- when no pair work is left: the full-scale all_reduce of the nodes that passed, then the halves of a slow
  group (all halves of one level in one round), down to bisect_floor nodes, whose nodes become suspects again.

Run it as: state = new_fleet(...); while (rnd := plan_next(state)): record(state, rnd, run(rnd)); then
verdicts(state). Everything is linear in the number of nodes (plus one sort per round).
"""

from __future__ import annotations

import random

from gpuval.fleet.model import Round, Test, TestKind
from gpuval.fleet.pairing import PartnerPool, by_group, cross_pairs, screen_pairs
from gpuval.fleet.state import FleetState, NodeState
from gpuval.fleet.uplinks import uplink_ok


class _Builder:
    """Collects one round's tests and the nodes they use."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tests: list[Test] = []
        self.used: set[str] = set()

    def add(self, kind: TestKind, nodes: tuple[str, ...], samples: int, purpose: str) -> None:
        self.tests.append(Test(f"r{self.index}-{purpose}-{len(self.tests)}", kind, nodes, samples, purpose))
        self.used.update(nodes)

    def free(self, *nodes: str) -> bool:
        return not any(n in self.used for n in nodes)


def plan_next(state: FleetState) -> Round | None:
    """The next round, or None when there is nothing left to learn (then call verdicts(state))."""
    cfg = state.config
    index = len(state.rounds)
    if index >= cfg.max_rounds:
        return None
    rng = random.Random(f"{cfg.seed}:{index}")  # a string seed is hashed the same way in every process
    b = _Builder(index)
    for n in state.in_state(NodeState.NEW):
        first = not state.nodes[n].suite
        b.add("node", (n,), cfg.suite_samples, "suite" if first else "rerun")
    _pair_work(state, b, rng)
    if b.tests:
        return Round(index, tuple(b.tests))
    if state.bisect_pending:
        for i in state.bisect_pending:
            b.add("group", state.group_runs[i].nodes, cfg.retest_samples, "bisect")
        return Round(index, tuple(b.tests))
    if state.scale_due and state.scale_runs < cfg.max_scale_runs:
        nodes = scale_nodes(state)
        if len(nodes) >= 2:
            b.add("group", nodes, cfg.retest_samples, "scale")
            return Round(index, tuple(b.tests))
    return None


def _pair_work(state: FleetState, b: _Builder, rng: random.Random) -> None:
    cfg = state.config
    for a, c in sorted(state.open_links):
        ends = (state.nodes[a], state.nodes[c])
        if all(r.state == NodeState.CLEARED for r in ends) and b.free(a, c):
            b.add("pair", (a, c), cfg.retest_samples, "link")
    cleared = [n for n in state.in_state(NodeState.CLEARED) if b.free(n)]
    topology = len(set(state.groups.values())) > 1
    preferred = {n for n in cleared if state.nodes[n].cross_done} if topology else set()
    pool = PartnerPool(cleared, state.groups, rng, preferred)
    waiting = state.in_state(NodeState.READY)
    for n in state.in_state(NodeState.SUSPECT) + (waiting if cleared else []):
        partner = pool.take(n, state.nodes[n].partners) if b.free(n) else None
        if partner:
            b.add("pair", (n, partner), cfg.retest_samples, "retest")
    pairs, _odd = screen_pairs([n for n in waiting if b.free(n)], state.groups, rng)
    for pair in pairs:
        b.add("pair", pair, cfg.screen_samples, "screen")
    # Cross-switch tests once the first screen has cleared nodes, and afterwards only alongside other pair work
    # (for nodes that were busy as partners), so they never cost a round of their own.
    if topology and (not state.cross_started or any(t.kind == "pair" for t in b.tests)):
        free = [n for n in state.in_state(NodeState.CLEARED) if b.free(n) and not state.nodes[n].cross_done]
        if len(by_group(free, state.groups)) > 1:
            for pair in cross_pairs(free, state.groups, rng)[0]:
                b.add("pair", pair, cfg.screen_samples, "cross")


def scale_nodes(state: FleetState) -> tuple[str, ...]:
    """The nodes that passed (cleared, no warning, nothing against their switch uplink), switch by switch so that
    bisection halves follow switch boundaries."""
    rank = {g: i for i, g in enumerate(dict.fromkeys(state.groups.get(n, "") for n in state.order))}
    nodes = [n for n in state.in_state(NodeState.CLEARED)
             if state.nodes[n].warn is None and uplink_ok(state, n)]
    return tuple(sorted(nodes, key=lambda n: rank[state.groups.get(n, "")]))
