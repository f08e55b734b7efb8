"""The fleet planner: the next round from what the last rounds showed. Pure: same state, same round.

The rounds, in order (each round holds every kind of work that is due, on disjoint nodes):
- round 0: every node's health suite and in-node all_reduce at once;
- node suites to re-run (a crash or an in-node figure under the fleet gets a second run before any verdict);
- link confirmations: a pair that failed while both its ends were since cleared runs once more;
- suspects, each with a known-good partner it has not had (same switch first), and nodes still waiting for
  their first pair (with known-good partners once there are any, else among themselves);
- the screening pairs (round 1: inside switches first, or random), and, once, the cross-switch pairs of every
  cleared node that is free, so a bad uplink shows (afterwards alongside other pair work, until the full-scale run);
- the full-scale all_reduce of the nodes that passed: beside the pair work left once that is a tail (at most
  TAIL_SHARE of the fleet left out), else when no pair work is left; then the halves of a slow group (all halves
  of one level in one round), down to bisect_floor nodes, whose nodes become suspects again.

Every pair test takes the samples the fleet's measured per-sample noise needs to decide it (pair_samples,
deciding_samples), never fewer than configured: on a quiet fleet that is the configured count.

Run it as: state = new_fleet(...); while (rnd := plan_next(state)): take_round(state, rnd, run(rnd)); then
verdicts(state). Everything is linear in the number of nodes (plus one sort per round).
"""

from __future__ import annotations

import math
import random

from gpuval.results.model import Status
from gpuval.fleet.plan.terms import COLLECTIVES, Round, Test, TestKind
from gpuval.fleet.plan.pairing import PartnerPool, by_group, cross_pairs, screen_pairs
from gpuval.fleet.plan.rounds import combine
from gpuval.fleet.plan.knowledge import FleetKnowledge, NodeStage
from gpuval.fleet.plan.racks import held, in_failed_rack, rack_work, settle_wait
from gpuval.fleet.plan.racks_book import RACK_PURPOSES
from gpuval.fleet.plan.uplinks import uplink_ok


# Standard errors to spare that each pair test is sized for, beyond what its verdict needs: a screening pair passes
# with clear_z + MARGIN standard errors inside the cut when its nodes are at the fleet's centre (about 98% of healthy
# pairs clear, so noise makes few suspects and opens few links); a re-test when its suspect is half-way to the cut
# (a healthy node off the centre is decided in one test: a suspect has no round to spare); and a suspect's later
# re-test so that a shortfall like its tests' so far would be beyond the cut by z + MARGIN standard errors of all of
# them together. At the 3% per-sample noise the defaults were set for, the first two are the default samples (8, 32).
MARGIN = 2.0
# The share of the fleet the full-scale run may leave out to go beside the pair work left instead of after it
# (scale_beside): nodes still to be decided, and nodes busy in that round's tests.
TAIL_SHARE = 0.01


class _Builder:
    """Collects one round's tests and the nodes they use."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tests: list[Test] = []
        self.used: set[str] = set()

    def add(self, kind: TestKind, nodes: tuple[str, ...], samples: int, purpose: str, settle_s: float = 0.0) -> None:
        self.tests.append(Test(f"r{self.index}-{purpose}-{len(self.tests)}", kind, nodes, samples, purpose,
                               settle_s))
        self.used.update(nodes)

    def free(self, *nodes: str) -> bool:
        return not any(n in self.used for n in nodes)


def plan_next(state: FleetKnowledge) -> Round | None:
    """The next round, or None when there is nothing left to learn (then call verdicts(state))."""
    cfg = state.config
    index = len(state.rounds)
    if index >= cfg.max_rounds:
        return None
    rng = random.Random(f"{cfg.seed}:{index}")  # a string seed is hashed the same way in every process
    b = _Builder(index)
    for n in state.in_state(NodeStage.NEW):
        first = not state.nodes[n].suite
        b.add("node", (n,), cfg.suite_samples, "suite" if first else "rerun", settle_wait(state, n))
    rack_work(state, b.add, b.free, rng, lambda tray: deciding_samples(state, tray, collectives=1))
    _pair_work(state, b, rng)
    beside = scale_beside(state, b)
    if not beside and not state.scale_runs:
        # Cross-switch tests gather the uplinks' evidence until the full-scale run (which waits for every uplink
        # it spans to be judged); after it they would only open links to confirm.
        _cross_work(state, b, rng)
    if b.tests:
        if beside:
            b.add("group", tuple(n for n in scale_nodes(state) if b.free(n)), cfg.retest_samples, "scale")
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


def _pair_work(state: FleetKnowledge, b: _Builder, rng: random.Random) -> None:
    cfg = state.config
    screen, retest = pair_samples(state, cfg.screen_samples, 0.0), pair_samples(state, cfg.retest_samples, 0.5)
    for a, c in sorted(state.open_links):
        ends = (state.nodes[a], state.nodes[c])
        if b.free(a, c) and all(r.state == NodeStage.CLEARED for r in ends):
            b.add("pair", (a, c), retest, "link")
        elif b.free(a, c) and {r.state for r in ends} == {NodeStage.CLEARED, NodeStage.SUSPECT} and \
                [e.test.purpose for e in state.links[(a, c)].evidence] == ["screen"]:
            # A suspect whose failed screening partner has since been cleared is re-tested with it, once: one test
            # is its re-test with a known-good partner and the link's confirmation (a pass clears both).
            suspect = a if ends[0].state == NodeStage.SUSPECT else c
            b.add("pair", (a, c), max(retest, deciding_samples(state, suspect)), "retest")
    cleared = [n for n in state.in_state(NodeStage.CLEARED) if b.free(n)]
    topology = len(set(state.groups.values())) > 1
    preferred = {n for n in cleared if state.nodes[n].cross_done} if topology else set()
    pool = PartnerPool(cleared, state.groups, rng, preferred)
    waiting = [n for n in state.in_state(NodeStage.READY) if not held(state, n)]  # a rack's trays: racks.py's
    suspects = [n for n in state.in_state(NodeStage.SUSPECT) if not held(state, n)]
    for n in suspects + (waiting if cleared else []):
        partner = pool.take(n, state.nodes[n].partners) if b.free(n) else None
        if partner:
            b.add("pair", (n, partner), max(retest, deciding_samples(state, n)), "retest")
    pairs, _odd = screen_pairs([n for n in waiting if b.free(n)], state.groups, rng)
    for pair in pairs:
        b.add("pair", pair, screen, "screen")


def _cross_work(state: FleetKnowledge, b: _Builder, rng: random.Random) -> None:
    """Cross-switch tests once the first screen has cleared nodes, and afterwards alongside other pair or rack work
    (for nodes that were busy as partners, or in their rack's tests), so they cost no round of their own; except
    for a switch none of whose nodes crossed yet (an NVL72 rack whose all_reduce ran late): its uplink is judged
    by nothing else."""
    if len(set(state.groups.values())) <= 1:
        return
    free = [n for n in state.in_state(NodeStage.CLEARED) if b.free(n) and not state.nodes[n].cross_done]
    busy = any(t.kind == "pair" or t.purpose in RACK_PURPOSES for t in b.tests)
    if state.cross_started and not busy and all(state.groups.get(n, "") in state.uplink_evidence for n in free):
        return
    if len(by_group(free, state.groups)) > 1:
        screen = pair_samples(state, state.config.screen_samples, 0.0)
        for pair in cross_pairs(free, state.groups, rng)[0]:
            b.add("pair", pair, screen, "cross")


def pair_samples(state: FleetKnowledge, floor: int, off_centre: float) -> int:
    """Samples per collective of a pair test: `floor` (the configured), or more where the fleet's per-sample noise
    needs them for a node `off_centre` of the way to the cut to pass with MARGIN standard errors to spare (up to
    max_samples)."""
    cfg = state.config
    return state.calibration.samples_for((1.0 - off_centre) * cfg.cut / (cfg.clear_z + MARGIN),
                                         len(COLLECTIVES["pair"]), floor, cfg.max_samples)


def deciding_samples(state: FleetKnowledge, node: str, collectives: int = len(COLLECTIVES["pair"])) -> int:
    """Samples per collective of a suspect's next re-test: enough that, with its tests with known-good partners so
    far, a shortfall like theirs is decided (beyond the cut by z + MARGIN standard errors of all of them together,
    or within it by clear_z + MARGIN): a node just past the cut, or just inside it, needs many samples, one far from
    it few. The configured re-test samples (the least) before its first test with a known-good partner. `collectives`:
    the collectives its test pools (a pair's two; a rack's one)."""
    cfg, rec = state.config, state.nodes[node]
    measured = [e for e in rec.good_fails.values() if e.shortfall is not None and e.se]
    if not measured:
        return cfg.retest_samples
    d, se = combine(measured)
    wanted = (d - cfg.cut) / (cfg.z + MARGIN) if d > cfg.cut else (cfg.cut - d) / (cfg.clear_z + MARGIN)
    if wanted <= 0:  # exactly at the cut: as many as allowed
        return state.calibration.samples_for(0.0, collectives, cfg.retest_samples, cfg.max_samples)
    more = 1.0 / wanted ** 2 - 1.0 / se ** 2  # what the next test must add: inverse variances add up
    if more <= 0:
        return cfg.retest_samples
    return state.calibration.samples_for(1.0 / math.sqrt(more), collectives, cfg.retest_samples,
                                         cfg.max_samples)


def scale_beside(state: FleetKnowledge, b: _Builder) -> bool:
    """Whether the full-scale run goes this round, beside the pair work planned so far in `b`: once that is a tail
    (the nodes it would leave out, still to be decided or busy in this round's tests, are at most TAIL_SHARE of the
    fleet: their tests were refused or not sure) and every switch of the nodes it would run on (those that passed and are free) has its uplink judged.
    A tail of a few nodes then costs no round of its own, and a full-scale run that could not run runs again beside
    what is left. Never in a round without pair work: then it runs alone (plan_next)."""
    cfg = state.config
    if not b.tests or not state.scale_due or state.scale_runs >= cfg.max_scale_runs or state.bisect_pending:
        return False
    left = {n for n in state.in_state(NodeStage.NEW, NodeStage.READY, NodeStage.SUSPECT)
            if not in_failed_rack(state, n)} | b.used  # a rack found bad as a whole leaves its trays untested
    if len(left) > TAIL_SHARE * len(state.order):
        return False
    passed = [n for n in scale_nodes(state) if b.free(n)]
    if len(passed) < 2:
        return False
    switches = {state.groups.get(n, "") for n in passed}  # of the nodes it would run on: not those busy this round
    return len(set(state.groups.values())) <= 1 or all(
        sw in state.uplinks and state.uplinks[sw].status is not Status.SKIPPED for sw in switches)


def scale_nodes(state: FleetKnowledge) -> tuple[str, ...]:
    """The nodes that passed (cleared, no warning, nothing against their switch uplink, not in a rack found bad as
    a whole), switch by switch so that bisection halves follow switch boundaries."""
    rank = {g: i for i, g in enumerate(dict.fromkeys(state.groups.get(n, "") for n in state.order))}
    nodes = [n for n in state.in_state(NodeStage.CLEARED)
             if state.nodes[n].warn is None and uplink_ok(state, n) and not in_failed_rack(state, n)]
    return tuple(sorted(nodes, key=lambda n: rank[state.groups.get(n, "")]))
