"""Who runs with whom: screening pairs (random or inside switches first), cross-switch pairs, known-good partners.

All of it is linear in the number of nodes (one shuffle, one pass), seeded, and never pairs a node twice in one
round.

Topology-aware pairing (a node -> switch map from Slurm's topology or Kubernetes node labels): the screen pairs
nodes under the same switch first, so a pair's figure says something about its two nodes and their leaf only;
a bad uplink then shows in the cross-switch round as the failures of one switch's nodes with the other
switches. Without a topology every pairing is random (seeded).
"""

from __future__ import annotations

import random
from typing import Iterable, Sequence

Pair = tuple[str, str]


def random_pairs(nodes: Sequence[str], rng: random.Random) -> tuple[list[Pair], list[str]]:
    """Disjoint random pairs; the odd node out is left over."""
    order = list(nodes)
    rng.shuffle(order)
    pairs = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    return pairs, order[len(pairs) * 2:]


def by_group(nodes: Iterable[str], groups: dict[str, str]) -> dict[str, list[str]]:
    """Nodes per switch (nodes the map does not know share the group '')."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        out.setdefault(groups.get(n, ""), []).append(n)
    return out


def spread_pairs(nodes: Sequence[str], groups: dict[str, str], rng: random.Random) -> tuple[list[Pair], list[str]]:
    """Pairs across switches where possible: sorted by switch, position i meets position i + half."""
    order = list(nodes)
    rng.shuffle(order)
    order.sort(key=lambda n: groups.get(n, ""))
    half = len(order) // 2
    pairs = [(order[i], order[i + half]) for i in range(half)]
    return pairs, order[2 * half:]


def screen_pairs(nodes: Sequence[str], groups: dict[str, str], rng: random.Random) -> tuple[list[Pair], list[str]]:
    """The screening pairs: inside each switch first, the switches' odd nodes across, or random without a map."""
    if not groups:
        return random_pairs(nodes, rng)
    pairs: list[Pair] = []
    odd: list[str] = []
    for members in by_group(nodes, groups).values():
        inside, rest = random_pairs(members, rng)
        pairs += inside
        odd += rest
    across, rest = spread_pairs(odd, groups, rng)
    return pairs + across, rest


def cross_pairs(nodes: Sequence[str], groups: dict[str, str], rng: random.Random) -> tuple[list[Pair], list[str]]:
    """Each node with a random node under another switch (seeded), so each switch meets many others.

    Random rather than a fixed schedule: after suspects took their partners the switches hold unequal numbers
    of free nodes, and a fixed schedule would leave some switches meeting only one or two others.
    """
    order = [(n, groups.get(n, "")) for n in nodes]
    rng.shuffle(order)
    waiting: list[tuple[str, str]] = []
    pairs: list[Pair] = []
    for node, group in order:
        if waiting and waiting[-1][1] != group:  # the usual case: the last waiting node is under another switch
            pairs.append((waiting.pop()[0], node))
            continue
        for i in range(len(waiting) - 2, -1, -1):  # the waiting nodes share a switch only when one dominates
            if waiting[i][1] != group:
                pairs.append((waiting.pop(i)[0], node))
                break
        else:
            waiting.append((node, group))
    return pairs, [n for n, _ in waiting]


class PartnerPool:
    """Known-good nodes to pair suspects with: same switch first (so an uplink is not in the way), then any.

    `preferred` nodes are handed out first within each switch (e.g. those whose cross-switch test is done, so
    lending them costs nothing later). Each node is handed out once; a suspect never gets a partner it already had.
    """

    def __init__(self, cleared: Sequence[str], groups: dict[str, str], rng: random.Random,
                 preferred: set[str] | frozenset[str] = frozenset()) -> None:
        order = list(cleared)
        rng.shuffle(order)
        order.sort(key=lambda n: n in preferred)  # popped from the end: preferred first
        self._groups = groups
        self._by_group = by_group(order, groups)
        self._all = order
        self._taken: set[str] = set()

    def take(self, node: str, avoid: set[str]) -> str | None:
        """A partner for `node` that is not in `avoid`, or None when none is left."""
        own = self._by_group.get(self._groups.get(node, ""), [])
        for stack in (own, self._all):
            found = self._pop(stack, avoid | {node})
            if found:
                return found
        return None

    def _pop(self, stack: list[str], avoid: set[str]) -> str | None:
        skipped = []
        found = None
        while stack:
            cand = stack.pop()
            if cand in self._taken:
                continue
            if cand in avoid:
                skipped.append(cand)
                continue
            found = cand
            break
        stack.extend(reversed(skipped))
        if found:
            self._taken.add(found)
        return found
