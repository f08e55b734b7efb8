"""Taking one round's results in: judge every test, then move nodes, links and switch uplinks on.

The rules, one by one:
- node suite: a crash, a failed health suite, an in-node figure confidently under the fleet or a GPU figure under
  the fleet's nodes of its GPU model (node_figures.py) earns one re-run; two failures convict (GPUS_SLOW when both
  were its GPU figures'), and a health-suite FAIL is the baseline judge's verdict and convicts at once. A node that
  passes its re-run warns (failed once) unless its runs together are within the fleet: the first was noise.
- a pair test that passes clears both nodes and their link (the pair can only be as fast as its slower end).
- a pair test that fails or is not sure makes its not-yet-cleared nodes suspects; a suspect is re-tested with a
  known-good (cleared) partner each round, never convicted by a partner that is not known good. A failure counts
  against it once its partner is known good (cleared before the test, or since: a screening partner that passed
  with someone else) over a known-good path (the same switch, or two switches whose uplinks pass). It is convicted
  after failing with two different known-good partners, when the failures together are beyond the cut by z
  standard errors (or both crashed); it is cleared by one pass, or by its tests with known-good partners together
  confidently within the cut; after max_retests it is undecided (SKIPPED).
- a link whose test failed while both ends were later cleared (each passed with someone else) is re-tested once
  more between the same two nodes: failing again convicts the link ("fails only together"), passing clears it.
- a switch uplink fails when most of its nodes' cross-switch tests with cleared nodes fail, two of them with
  switches that passed a cross-switch test elsewhere (known-good switches): see uplinks.py.
- could-not-run results are counted, never judged: max_not_run of them in a row make the node's verdict ERROR.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, Sequence

from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.weighing import Basis, classify, clears, confidently_beyond, health_note, scope_of, weigh
from gpuval.fleet.plan.terms import Evidence, FleetConfig, Round, TestResult
from gpuval.fleet.plan.knowledge import FleetKnowledge, GroupRun, LinkHistory, LinkStage, NodeHistory, NodeStage, Standing
from gpuval.fleet.plan import racks
from gpuval.fleet.plan.racks_book import RACK_PURPOSES
from gpuval.fleet.plan.uplinks import update_uplinks


def take_round(state: FleetKnowledge, rnd: Round, results: Iterable[TestResult]) -> FleetKnowledge:
    """Add one round's results to `state` (in place; returned for chaining). A missing result is 'could not run'."""
    by_id = {r.test_id: r for r in results}
    pairs = [(t, by_id.get(t.id) or TestResult(t.id, not_run="no result came back")) for t in rnd.tests]
    before = {n: state.nodes[n].state for n in rnd.nodes}
    state.calibration.update(pairs, state.groups, state.expect, state.config)
    racks.calibrate(state, pairs)
    _widen_cut(state)
    state.rounds.append(rnd)
    basis = Basis(state.calibration, state.config, state.groups, state.expect)
    for test, result in pairs:
        if test.purpose in RACK_PURPOSES:  # an NVL72 rack's test: weighed and taken in by racks.py
            racks.take_rack_test(state, test, result, rnd.index, before, _pair_for_node)
            continue
        ev = weigh(test, result, rnd.index, basis)
        if test.kind == "node":
            racks.note_node(state, test.nodes[0], result)
            if not racks.settles(state, test.nodes[0], ev, result):  # NVLink down right after a boot: again later
                _node_suite(state, state.nodes[test.nodes[0]], ev, health_note(result))
        elif test.kind == "pair":
            _pair(state, ev, before)
        else:
            _group(state, ev)
    racks.place(state)
    update_uplinks(state)
    _settle_suspects(state, rnd)
    _update_links(state)
    racks.settle(state)
    return state


def _widen_cut(state: FleetKnowledge) -> None:
    """Where the fleet's healthy tests or samples spread wider than the cut, judge by that spread (and say so): a
    cut inside the noise would make every healthy node a suspect and leave all of them undecided. Node tests and
    the network's tests (pairs, groups) each by their own spread."""
    cal = state.calibration
    wanted, why = cal.widest(state.config, node_tests=False)
    if wanted > state.config.cut:
        state.config = replace(state.config, cut=wanted)
        state.widened["network"] = _widened_note("pair and group tests", state.cut_asked, wanted, why)
    node_cut, why = cal.widest(state.config, node_tests=True)
    if node_cut > max(state.cut_asked, cal.node_cut):
        cal.node_cut = node_cut
        state.widened["node"] = _widened_note("node tests", state.cut_asked, node_cut, why)


def _widened_note(what: str, asked: float, cut: float, why: str) -> str:
    return (f"cut of {what} widened from {100 * asked:.0f}% to {100 * cut:.0f}%: the {why}, wider than the cut "
            "allows to judge; a node slower than the asked cut but within this one is not found (more samples or "
            "a quieter fleet narrow it)")


def _node_suite(state: FleetKnowledge, rec: NodeHistory, ev: Evidence, health: str) -> None:
    """One node test taken in (`health`: what its health suite said, for a verdict's words)."""
    rec.evidence.append(ev)
    cfg = state.calibration.node_config(state.config)  # node tests: judged by their own spread
    if ev.status == Status.ERROR:
        _not_run(state, rec, ev)
        return
    rec.not_run = 0
    rec.suite.append(ev)
    if ev.cause is Cause.HEALTH_FAILED:
        _convict(rec, Cause.HEALTH_FAILED, f"node suite: {ev.reason}")  # the health suite's (baseline-judged) verdict
        return
    fails = [e for e in rec.suite if e.status == Status.FAIL]
    if ev.status == Status.FAIL and len(rec.suite) == 1:
        return  # one failure is never a verdict: the suite runs again (state stays NEW)
    if sum(e.cause is Cause.GPUS_SLOW for e in fails) >= 2:  # its GPU figures under the fleet's, twice
        _convict(rec, Cause.GPUS_SLOW, "node suite: " + "; then ".join(e.reason for e in rec.suite))
        return
    slow = [e for e in rec.suite if e.shortfall is not None and e.se]
    d, se = combine(slow) if slow else (0.0, math.inf)
    if len(fails) >= 2 or (fails and slow and confidently_beyond(d, se, cfg)):
        crashed = all(e.shortfall is None for e in fails)  # no figure in any failure: it crashed, never measured
        _convict(rec, Cause.NODE_CRASHED if crashed else Cause.NODE_SLOW,
                 "node suite: " + "; then ".join(e.reason for e in rec.suite))
        return
    rec.state = NodeStage.READY
    gpus = state.calibration.gpus
    if fails and (any(e.shortfall is None for e in fails) or d > cfg.cut or
                  gpus.together(gpus.model_of.get(rec.name, ""), [e.figures for e in rec.suite])):
        rec.warn = Standing(Status.WARN, Cause.FAILED_ONCE,
                            "node suite failed once, not on re-run: " + "; then ".join(e.reason for e in rec.suite))
    elif ev.cause is Cause.HEALTH_WARNS:
        rec.warn = Standing(Status.WARN, Cause.HEALTH_WARNS, ev.reason)
    if ev.cause is Cause.HEALTH_NOT_RUN:
        rec.unchecked = Standing(Status.ERROR, Cause.HEALTH_NOT_RUN, health)


def _pair(state: FleetKnowledge, ev: Evidence, before: dict[str, NodeStage]) -> None:
    nodes = ev.test.nodes
    state.cross_started = state.cross_started or ev.test.purpose == "cross"  # once, even if it could not run
    link = state.links.setdefault(_key(nodes), LinkHistory(_key(nodes)))
    link.evidence.append(ev)
    if ev.status != Status.ERROR:
        if link.state == LinkStage.UNTESTED:
            link.state = LinkStage.PASS if clears(ev, state.config.cut) else LinkStage.OPEN
            if link.state == LinkStage.OPEN:
                state.open_links.add(link.ends)
            elif ev.status != Status.PASS:
                link.settle(LinkStage.PASS, Cause.MEASURED, f"within the cut, though not sure: {ev.reason}")
        if ev.test.purpose == "cross" and all(before[n] == NodeStage.CLEARED for n in nodes):
            for n in nodes:
                state.uplink_evidence.setdefault(state.groups.get(n, ""), []).append(ev)
    for node in nodes:
        rec = state.nodes[node]
        rec.evidence.append(ev)
        others = [n for n in nodes if n != node]
        rec.partners.update(others)
        if ev.test.purpose == "cross":
            rec.cross_done = True
        good = all(before[o] == NodeStage.CLEARED for o in others)
        _pair_for_node(state, rec, ev, good, others)


def _pair_for_node(state: FleetKnowledge, rec: NodeHistory, ev: Evidence, good: bool, others: list[str]) -> None:
    if rec.state not in (NodeStage.READY, NodeStage.SUSPECT):
        return  # a cleared node lent as partner keeps its standing; the suspect or the link answers for the test
    if ev.status == Status.ERROR:
        _not_run(state, rec, ev)
        return
    rec.not_run = 0
    if good:
        rec.retests += 1
    if ev.status == Status.PASS:
        rec.state, rec.good_fails, rec.pending = NodeStage.CLEARED, {}, {}
        return
    rec.state = NodeStage.SUSPECT
    rec.pending[others[0]] = ev  # evidence against it once the partner, and the path to it, are known good


def _settle_suspects(state: FleetKnowledge, rnd: Round) -> None:
    """Count each suspect's failures whose partner is now known good (cleared: passed with someone else, in this
    round or after the test) over a known-good path (the same switch, or two switches whose uplinks pass: a failure
    across an uplink in doubt may be the uplink's), then decide the suspects this round tested or taught something.

    A screening partner cleared later is as good a witness as a partner cleared before: both passed with someone
    else, so the failure was not theirs."""
    tested = rnd.nodes  # a property: built once
    for node in state.in_state(NodeStage.SUSPECT):
        rec = state.nodes[node]
        known = [p for p in rec.pending if state.nodes[p].state == NodeStage.CLEARED and _path_known(state, node, p)]
        for partner in known:
            rec.good_fails[partner] = rec.pending.pop(partner)
        if known or node in tested:
            _decide_suspect(state, rec)


def _path_known(state: FleetKnowledge, a: str, b: str) -> bool:
    """Whether nothing but the two nodes lies between `a` and `b`: one switch (or no topology), one NVL72 rack, or two
    switches whose uplinks pass."""
    ga, gb = state.groups.get(a, ""), state.groups.get(b, "")
    if ga == gb or state.racks.same_rack(a, b):  # two trays of one rack meet over its NVLink domain
        return True
    return all(g in state.uplinks and state.uplinks[g].status == Status.PASS for g in (ga, gb))


def _decide_suspect(state: FleetKnowledge, rec: NodeHistory) -> None:
    """Convict after failures with two different known-good partners, confidently together; clear it when its tests
    with known-good partners are confidently within the cut together; or give up."""
    cfg = state.config
    fails = list(rec.good_fails.values())
    if len(fails) >= 2:
        crashed = [e for e in fails if e.shortfall is None]
        slow = [e for e in fails if e.shortfall is not None and e.se]
        d, se = combine(slow) if slow else (0.0, math.inf)
        confident = confidently_beyond(d, se, cfg)
        firm = sum(e.status == Status.FAIL for e in fails)
        if firm >= 2 or (slow and confident):  # a crash is a FAIL: two crashes are two firm failures
            partners = ", ".join(sorted(rec.good_fails))
            how = (f"{100 * d:.1f}% ± {100 * se:.1f}% under the fleet" if slow else "crashed")
            cause = Cause.BROKEN if len(crashed) >= len(slow) else Cause.SLOW
            _convict(rec, cause, f"{cause.value}: {how} with {len(fails)} known-good partners ({partners}); "
                                 + "; ".join(e.reason for e in fails))
            return
        if slow and len(slow) == len(fails) and classify(d, se, cfg.cut, cfg) is Status.PASS:
            # Each test alone was not sure; together they are, the same judge as a conviction's, the other way.
            rec.state, rec.good_fails, rec.pending, rec.cause = NodeStage.CLEARED, {}, {}, Cause.MEASURED
            rec.reason = (f"{100 * d:.1f}% ± {100 * se:.1f}% under the fleet in {len(fails)} tests with known-good "
                          "partners together: within the cut")
            return
    if rec.retests >= cfg.max_retests:
        # Out of re-tests: a point estimate within the cut passes (the noise kept it from being sure, nothing
        # says it is slow); beyond the cut, or crashing, it is left undecided (SKIPPED), never convicted.
        slow = [e for e in fails if e.shortfall is not None and e.se]
        d, se = combine(slow) if slow else (math.inf, math.inf)
        if slow and len(slow) == len(fails) and d <= cfg.cut:
            rec.state, rec.good_fails, rec.pending, rec.cause = NodeStage.CLEARED, {}, {}, Cause.MEASURED
            rec.reason = f"{100 * d:.1f}% ± {100 * se:.1f}% under the fleet after {rec.retests} tests: within the cut"
            return
        rec.state, rec.cause = NodeStage.UNDECIDED, Cause.UNDECIDED
        why = "; ".join(e.reason for e in fails[-2:]) or (
            "it failed only across switch uplinks not known good: the node or its uplink")
        rec.reason = f"undecided after {rec.retests} tests with known-good partners: {why}"


def combine(evs: Sequence[Evidence]) -> tuple[float, float]:
    """Inverse-variance weighted mean of shortfalls and its standard error."""
    weights = [1.0 / (e.se or math.inf) ** 2 for e in evs]
    total = sum(weights)
    if not total:
        return 0.0, math.inf
    d = sum(w * (e.shortfall or 0.0) for w, e in zip(weights, evs)) / total
    return d, 1.0 / math.sqrt(total)


def _convict(rec: NodeHistory, cause: Cause, reason: str) -> None:
    rec.state, rec.cause, rec.reason = NodeStage.FAILED, cause, reason


def _not_run(state: FleetKnowledge, rec: NodeHistory, ev: Evidence) -> None:
    """One more could-not-run in a row (a test that ran starts the count again): a node whose tests run in between
    is not one that cannot be tested, and an engine that refuses a share of all jobs must not leave nodes unchecked."""
    rec.not_run += 1
    if rec.not_run >= state.config.max_not_run and rec.state in (NodeStage.NEW, NodeStage.READY, NodeStage.SUSPECT):
        rec.state, rec.cause = NodeStage.NOT_RUN, Cause.COULD_NOT_RUN
        rec.reason = f"could not run {rec.not_run} times in a row: {ev.reason}"


def _group(state: FleetKnowledge, ev: Evidence) -> None:
    """A full-scale or bisection run: bisect a slow group, stop at small groups (their nodes become suspects)."""
    cfg = state.config
    if ev.test.purpose == "scale":
        state.group_runs.append(GroupRun(ev.test.nodes, "scale"))
        idx = len(state.group_runs) - 1
        state.scale_runs += 1
        state.scale_due = False
    else:
        idx = next((i for i in state.bisect_pending if state.group_runs[i].nodes == ev.test.nodes), -1)
        if idx < 0:
            raise ValueError(f"{ev.test.id}: a result for a bisection step that was not planned")
        state.bisect_pending.remove(idx)
    run = state.group_runs[idx]
    run.evidence = ev
    if ev.status in (Status.PASS, Status.SKIPPED):
        run.finding = "passes" if ev.status == Status.PASS else "not judged"
        _both_halves_pass(state, run)
    elif ev.status == Status.ERROR:
        run.finding = "could not run"
        state.scale_due = run.purpose == "scale" and state.scale_runs < cfg.max_scale_runs
    elif run.purpose == "scale" and ev.status == Status.WARN and state.scale_runs < cfg.max_scale_runs:
        state.scale_due, run.finding = True, "not sure: runs again"
    elif len(run.nodes) <= cfg.bisect_floor:
        run.finding = "slow: its nodes are re-tested with known-good partners"
        for n in run.nodes:
            _resuspect(state.nodes[n])
        state.scale_due = state.scale_runs < cfg.max_scale_runs
    else:
        half = len(run.nodes) // 2
        run.finding = "slow: bisected"
        for part in (run.nodes[:half], run.nodes[half:]):
            state.group_runs.append(GroupRun(part, "bisect", parent=idx))
            state.bisect_pending.append(len(state.group_runs) - 1)


def _both_halves_pass(state: FleetKnowledge, run: GroupRun) -> None:
    """A slow group whose halves both pass: slow only at its size, which no smaller test can show."""
    if run.parent is None:
        return
    sibs = [g for g in state.group_runs if g.parent == run.parent]
    if len(sibs) == 2 and all(g.evidence and g.evidence.status == Status.PASS for g in sibs):
        parent = state.group_runs[run.parent]
        parent.finding = f"slow only at {len(parent.nodes)} nodes: both halves pass"


def _resuspect(rec: NodeHistory) -> None:
    """A cleared node named by bisection: re-tested from scratch with known-good partners."""
    if rec.state == NodeStage.CLEARED:
        rec.state, rec.good_fails, rec.pending, rec.retests = NodeStage.SUSPECT, {}, {}, 0


def _update_links(state: FleetKnowledge) -> None:
    """Decide open links whose ends are settled; leave the rest open (the planner re-tests those it can)."""
    cfg = state.config
    for key in list(state.open_links):
        link = state.links[key]
        ends = [state.nodes[n] for n in key]
        runs = [e for e in link.evidence if e.status != Status.ERROR]
        bad = [e for e in runs if not clears(e, cfg.cut)]
        if len(link.evidence) - len(runs) >= cfg.max_not_run:
            link.settle(LinkStage.NOT_RUN, Cause.COULD_NOT_RUN,
                        f"could not run {len(link.evidence) - len(runs)} times")
        elif len(runs) > len(bad):
            if any(e.status == Status.FAIL for e in bad):
                link.settle(LinkStage.WARN, Cause.FAILED_ONCE, "failed once, passed on re-test: flaky?")
            else:
                link.settle(LinkStage.PASS, Cause.MEASURED, "passed on re-test (the first figure was noise)")
        elif any(r.state in (NodeStage.FAILED, NodeStage.UNDECIDED, NodeStage.NOT_RUN) for r in ends):
            link.settle(LinkStage.SKIPPED, Cause.NOT_JUDGED, "not judged: " + ", ".join(
                f"{r.name} is {r.state.value}" for r in ends if r.state != NodeStage.CLEARED))
        elif scope_of(link.evidence[0].test, state.groups) == "cross" and \
                {state.groups.get(n, "") for n in key} & state.uplinks_failed:
            link.settle(LinkStage.EXPLAINED, Cause.NOT_JUDGED, "through a switch uplink that fails")
        elif all(r.state == NodeStage.CLEARED for r in ends) and len(bad) >= 2:
            _decide_link(link, bad, cfg)
        else:
            continue
        if link.state != LinkStage.OPEN:
            state.open_links.discard(key)


def _decide_link(link: LinkHistory, bad: list[Evidence], cfg: FleetConfig) -> None:
    """Two firm failures (or failures confidently beyond the cut together) between two cleared ends: a bad link."""
    slow = [e for e in bad if e.shortfall is not None and e.se]
    d, se = combine(slow) if slow else (0.0, math.inf)
    if sum(e.status == Status.FAIL for e in bad) >= 2 or (slow and confidently_beyond(d, se, cfg)):
        how = f"{100 * d:.1f}% ± {100 * se:.1f}% under the fleet" if slow else "crashed"
        link.settle(LinkStage.FAIL, Cause.SLOW if slow else Cause.CRASHED,
                    f"fails only together ({how} in {len(bad)} tests) while both ends pass with other partners")
    elif len(bad) > cfg.max_retests:
        if slow and len(slow) == len(bad) and d <= cfg.cut:
            link.settle(LinkStage.PASS, Cause.MEASURED, f"within the cut after {len(bad)} tests")
        else:
            link.settle(LinkStage.WARN, Cause.UNDECIDED, f"undecided after {len(bad)} tests")


def _key(nodes: Sequence[str]) -> tuple[str, str]:
    a, b = sorted(nodes)[:2]
    return a, b
