"""The two baselines benchmarks/fleet_isolation.py sets gpuval's planner against, on the same simulated fleets.

Exhaustive pairwise (GCM --pairwise, SuperBench pair-wise): every pair of nodes once, scheduled by the circle
method in N-1 rounds of N/2 concurrent pairs (N rounds for odd N); one sample of all_reduce and sendrecv per
pair. A node fails when more than half its pairs crash, or when its mean shortfall over all its pairs is beyond
the cut (with N-1 partners one bad partner hardly moves it); a pair whose shortfall is confidently beyond the cut
(z standard errors) while neither node failed is reported as a bad link. It has no notion of switches: a bad
uplink shows as its nodes being slow. Simulated with numpy in row blocks (134 million pairs at 16,384 nodes).

Plain bisection (the manual method NCCL maintainers suggest): all_reduce of the whole fleet, one measurement of
8 samples judged against the SKU's expectation at the same cut (no re-test, no noise model); a slow or crashing
group is halved, both halves in the next round; a failing group of three nodes or fewer convicts all its nodes
(a lone node's all_reduce does not touch the network). A slow group whose halves both pass convicts nobody.
"""

from __future__ import annotations

import math
from statistics import fmean
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.fleet_isolation import Fleet


def circle_round(n: int, r: int) -> list[tuple[int, int]]:
    """Round `r` (0 .. n-2) of the circle method for `n` players (n even): n/2 disjoint pairs of indices.

    Player 0 stays put, the others rotate one place per round; over n-1 rounds every two players meet once.
    """
    if n < 2 or n % 2:
        raise ValueError("the circle method needs an even number of players, at least 2")
    others = list(range(1, n))
    k = r % (n - 1)
    ring = [0] + others[k:] + others[:k]
    return [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]


def exhaustive(fleet: Fleet, cut: float = 0.03, z: float = 3.5, seed: int = 0) -> dict:
    """Every pair once (what the circle method's N-1 rounds measure), judged as described above."""
    import numpy as np

    n = len(fleet.nodes)
    speed = np.array([fleet.speed[x] for x in fleet.nodes])
    names = sorted(set(fleet.groups.values()))
    sw = np.array([names.index(fleet.groups[x]) if fleet.groups else 0 for x in fleet.nodes])
    up = np.array([fleet.uplink.get(fleet.groups.get(x, ""), 1.0) for x in fleet.nodes])
    broken = np.array([x in fleet.broken for x in fleet.nodes])
    sigma = fleet.noise / math.sqrt(2)  # the mean of two collectives' ratios, one sample each
    rng = np.random.default_rng(seed)
    sums, counts, errors = np.zeros(n), np.zeros(n), np.zeros(n)
    flagged_i, flagged_j, centre = [], [], None
    block = max(1, (1 << 21) // n)
    for r0 in range(0, n, block):
        rows = np.arange(r0, min(n, r0 + block))[:, None]
        cols = np.arange(n)[None, :]
        upper = cols > rows
        factor = np.minimum(speed[rows], speed[cols])
        crossing = sw[rows] != sw[cols]
        factor = np.where(crossing, np.minimum(factor, np.minimum(up[rows], up[cols])), factor)
        ratio = factor * (1.0 + rng.normal(0.0, sigma, factor.shape))
        err = (broken[rows] | broken[cols]) & upper
        ok = upper & ~err
        if centre is None:
            centre = float(np.median(ratio[ok])) if ok.any() else 1.0
        good = np.where(ok, ratio, 0.0)
        r1 = r0 + len(rows)
        sums[r0:r1] += good.sum(axis=1)
        sums += good.sum(axis=0)
        counts[r0:r1] += ok.sum(axis=1)
        counts += ok.sum(axis=0)
        errors[r0:r1] += err.sum(axis=1)
        errors += err.sum(axis=0)
        slow = ok & (1.0 - ratio / centre - z * sigma > cut)
        i, j = np.nonzero(slow)
        flagged_i.append(i + r0)
        flagged_j.append(j)
    d = 1.0 - sums / np.maximum(counts, 1) / centre
    failed = (errors > (n - 1) / 2) | (d > cut)
    fi, fj = np.concatenate(flagged_i), np.concatenate(flagged_j)
    links = int(np.count_nonzero(~failed[fi] & ~failed[fj]))
    failed_nodes = {fleet.nodes[k] for k in np.nonzero(failed)[0]}
    return {"failed_nodes": failed_nodes, "bad_links": links, "rounds": n - 1 if n % 2 == 0 else n,
            "tests": n * (n - 1) // 2}


def bisection(fleet: Fleet, cut: float = 0.03, samples: int = 8) -> dict:
    """Plain bisection from the whole fleet, as described above."""
    from benchmarks.fleet_isolation import NOMINAL

    rank = {g: i for i, g in enumerate(sorted(set(fleet.groups.values())))}
    groups = [sorted(fleet.nodes, key=lambda x: rank.get(fleet.groups.get(x, ""), 0))]
    convicted: set[str] = set()
    rounds = tests = 0
    while groups:
        rounds += 1
        tests += len(groups)
        halves = []
        for g in groups:
            res = fleet.measure(f"b{rounds}", "group", tuple(g), samples)
            slow = bool(res.error) or 1.0 - fmean(res.busbw["all_reduce"]) / NOMINAL["all_reduce"] > cut
            if not slow:
                continue
            if len(g) <= 3:
                convicted.update(g)
            else:
                halves += [g[:len(g) // 2], g[len(g) // 2:]]
        groups = halves
    return {"failed_nodes": convicted, "bad_links": 0, "rounds": rounds, "tests": tests}
