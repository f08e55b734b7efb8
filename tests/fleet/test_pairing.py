"""Who runs with whom: screening pairs, cross-switch pairs, known-good partners (seeded, disjoint)."""

from __future__ import annotations

import random
from collections import Counter

from gpuval.fleet.plan.pairing import PartnerPool, cross_pairs, random_pairs, screen_pairs

NODES = [f"n{i:03d}" for i in range(101)]
GROUPS = {n: f"s{i // 16}" for i, n in enumerate(NODES)}  # 6 switches of 16 and one of 5


def _flat(pairs):
    return [n for p in pairs for n in p]


def test_random_pairs_are_disjoint_seeded_and_leave_the_odd_node_out():
    pairs, odd = random_pairs(NODES, random.Random(1))
    assert len(pairs) == 50 and len(odd) == 1
    assert sorted(_flat(pairs) + odd) == NODES
    assert random_pairs(NODES, random.Random(1)) == (pairs, odd)
    assert random_pairs(NODES, random.Random(2)) != (pairs, odd)


def test_screen_pairs_stay_inside_switches_and_only_odd_nodes_cross():
    pairs, odd = screen_pairs(NODES, GROUPS, random.Random(0))
    assert sorted(_flat(pairs) + odd) == NODES
    crossing = [p for p in pairs if GROUPS[p[0]] != GROUPS[p[1]]]
    assert len(crossing) == 0 or all(Counter(GROUPS[n] for n in _flat(crossing))[g] == 1
                                     for g in {GROUPS[n] for n in _flat(crossing)})
    assert len(pairs) - len(crossing) == 6 * 8 + 2  # every switch's nodes in pairs inside it; s6 keeps one over


def test_without_a_topology_screening_is_random():
    pairs, _ = screen_pairs(NODES, {}, random.Random(0))
    assert (pairs, _) == random_pairs(NODES, random.Random(0))


def test_cross_pairs_cross_switches_and_spread_each_switch_over_many_others():
    pairs, left = cross_pairs(NODES, GROUPS, random.Random(3))
    assert all(GROUPS[a] != GROUPS[b] for a, b in pairs)
    assert len(_flat(pairs)) == len(set(_flat(pairs)))
    assert len(left) <= 1
    met = {g: {GROUPS[b] if GROUPS[a] == g else GROUPS[a] for a, b in pairs if g in (GROUPS[a], GROUPS[b])}
           for g in set(GROUPS.values())}
    assert all(len(others) >= 3 for g, others in met.items() if g != "s6")


def test_the_partner_pool_prefers_the_same_switch_avoids_old_partners_and_lends_each_node_once():
    cleared = [n for n in NODES if n not in ("n000", "n001", "n016")]
    pool = PartnerPool(cleared, GROUPS, random.Random(0), preferred={"n015"})
    first = pool.take("n000", avoid={"n001"})
    assert first == "n015"  # same switch, preferred first
    second = pool.take("n001", avoid={"n000"})
    assert GROUPS[second] == "s0" and second != first
    lent = {first, second}
    for _ in range(len(cleared)):
        p = pool.take("n016", avoid=set())
        if p is None:
            break
        assert p not in lent
        lent.add(p)
    assert lent == set(cleared)
    assert pool.take("n016", avoid=set()) is None
