"""The verdicts of a fleet check: per node, per link, per switch uplink, per group run, each with its evidence.

Vocabulary (results.Status): PASS, FAIL, WARN (passed with a blemish: crashed once, health warns), ERROR (could
not run, or a health check of its suite could not: never a hardware verdict), SKIPPED (not judged: undecided after
its re-tests, no partner, no expectation, explained by something else). A node's exit code is
results.verdict.exit_code_of its status: undecided and not judged are 2, never 0. Each verdict carries its cause
(causes.Cause: slow, broken, health failed, undecided, ...) beside its reason; a failed node's fault code comes from
the cause.
"""

from __future__ import annotations

from typing import Mapping

from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.terms import FleetVerdicts, Verdict
from gpuval.fleet.plan.knowledge import FleetKnowledge, GroupRun, LinkHistory, LinkStage, NodeHistory, NodeStage, Standing
from gpuval.fleet.plan.racks_judge import rack_explains, rack_verdicts
from gpuval.fleet.plan.uplinks import uplink_ok

_LINK_STATUS = {
    LinkStage.PASS: Status.PASS, LinkStage.FAIL: Status.FAIL, LinkStage.WARN: Status.WARN,
    LinkStage.SKIPPED: Status.SKIPPED, LinkStage.EXPLAINED: Status.SKIPPED, LinkStage.NOT_RUN: Status.ERROR,
    LinkStage.UNTESTED: Status.ERROR, LinkStage.OPEN: Status.WARN,
}
# A link in a state nothing had to explain: its cause and words.
_LINK_PLAIN = {
    LinkStage.PASS: (Cause.MEASURED, "the pair passes"), LinkStage.UNTESTED: (Cause.COULD_NOT_RUN, "could not run"),
    LinkStage.OPEN: (Cause.UNDECIDED, "undecided: its ends were never both cleared"),
}
# A node the rounds left short of a verdict of its own: the standing its state gives it.
_NODE_UNSETTLED = {
    NodeStage.SUSPECT: Standing(Status.SKIPPED, Cause.UNDECIDED,
                                "undecided: no known-good partner was left to re-test it with"),
    NodeStage.NEW: Standing(Status.SKIPPED, Cause.NOT_JUDGED, "not judged: its node suite did not finish"),
    NodeStage.READY: Standing(Status.SKIPPED, Cause.NOT_JUDGED,
                              "node suite passes; no partner for a pair test, so its network is not judged"),
}
# Undecided is not judged (never pass, never a hardware claim): SKIPPED, which the exit contract makes 2.
_NODE_SETTLED = {NodeStage.FAILED: Status.FAIL, NodeStage.NOT_RUN: Status.ERROR, NodeStage.UNDECIDED: Status.SKIPPED}


def verdicts(state: FleetKnowledge) -> FleetVerdicts:
    """Everything the rounds so far support (call it when plan_next returns None, or at any time)."""
    scaled = _in_full_scale(state)
    nodes = {n: _node(state, state.nodes[n], scaled) for n in state.order}
    links = {key: _link(state, link) for key, link in state.links.items()}
    uplinks = {sw: _uplink(state, sw) for sw in sorted(state.uplink_evidence)}
    groups = tuple(_group(g) for g in state.group_runs if g.evidence) + tuple(
        Verdict("group", f"every {n}-node {coll}", (), Status.FAIL, why, cause=Cause.FLEET_WIDE)
        for (coll, n), why in state.calibration.fleet_short.items())
    if state.cross_finding:
        groups += (Verdict("group", "cross-switch pairs", (), Status.FAIL, state.cross_finding,
                           cause=Cause.FLEET_WIDE),)
    groups += rack_verdicts(state)
    gpus = state.calibration.gpus
    uncompared = frozenset(n for n in gpus.model_of if gpus.why_not(n, _suite_figures(state.nodes[n])))
    return FleetVerdicts(nodes, links, uplinks, groups, len(state.rounds), _notes(state, nodes),
                         racks=dict(state.racks.of), gpus_not_compared=uncompared)


def _notes(state: FleetKnowledge, nodes: dict[str, Verdict]) -> tuple[str, ...]:
    """The widened cut, the GPU models with too few nodes to judge their figures, and for undecided nodes what would
    decide them."""
    notes = [*state.widened.values(), *state.calibration.gpus.notes()]
    undecided = [n for n, v in nodes.items() if v.cause is Cause.UNDECIDED]
    if undecided:
        cfg, noise = state.config, state.calibration.noise
        wider = max(2 * cfg.cut, 3 * noise)  # a cut of 100% or more would call nothing slow: not offered
        notes.append(f"{len(undecided)} node{'s' if len(undecided) != 1 else ''} undecided "
                     f"({', '.join(undecided[:8])}{', ...' if len(undecided) > 8 else ''}): the figures did not settle "
                     f"within the cut ({100 * cfg.cut:.0f}%; per-sample noise {100 * noise:.0f}%). To decide: more "
                     f"samples (--samples {cfg.suite_samples},{cfg.screen_samples},{2 * cfg.retest_samples} "
                     f"--max-samples {2 * cfg.max_samples}), "
                     + (f"a wider cut (--cut {wider:.2f}), " if wider < 1 else "") + "or a bigger message (--size)")
    return tuple(notes)


def _suite_figures(rec: NodeHistory) -> list[Mapping[str, float]]:
    return [e.figures for e in rec.suite]


def _in_full_scale(state: FleetKnowledge) -> frozenset[str] | None:
    """The nodes of the full-scale runs that ran, or None when none did."""
    runs = [g for g in state.group_runs if g.purpose == "scale" and g.evidence and g.evidence.status != Status.ERROR]
    return frozenset(n for g in runs for n in g.nodes) if runs else None


def _node(state: FleetKnowledge, rec: NodeHistory, scaled: frozenset[str] | None) -> Verdict:
    ev = tuple(rec.evidence)

    def verdict(status: Status, cause: Cause, reason: str) -> Verdict:
        return Verdict("node", rec.name, (rec.name,), status, reason, ev, cause=cause)

    if rec.state in _NODE_SETTLED:
        return verdict(_NODE_SETTLED[rec.state], rec.cause, rec.reason)
    explained = rack_explains(state, rec.name)  # a tray of a rack found bad as a whole: the rack's verdict says it
    if explained is not None:
        return verdict(explained.status, explained.cause, explained.reason)
    if rec.state in _NODE_UNSETTLED:
        plain = _NODE_UNSETTLED[rec.state]
        return verdict(plain.status, plain.cause, plain.reason)
    passed = next((e for e in reversed(ev) if e.test.kind == "pair" and e.status == Status.PASS), None)
    if passed:
        why = f"passes with {', '.join(n for n in passed.test.nodes if n != rec.name)} ({passed.test.id})"
    else:
        why = rec.reason or "passes"
    if not uplink_ok(state, rec.name):
        why += "; its switch uplink fails or is in doubt, so it was left out of the full-scale run"
    elif scaled is not None and rec.name not in scaled and rec.warn is None:
        why += "; not in the full-scale run (it ran beside this node's last pair tests)"
    unjudged = state.calibration.gpus.why_not(rec.name, _suite_figures(rec))
    if unjudged:
        why += f"; {unjudged}"
    caveat = rec.unchecked or rec.warn  # could not run outranks a warning: the node is not cleared
    if caveat is not None:
        return verdict(caveat.status, caveat.cause, f"{why}; but {caveat.reason}")
    return verdict(Status.PASS, Cause.MEASURED, why)


def _link(state: FleetKnowledge, link: LinkHistory) -> Verdict:
    a, b = link.ends
    crossed = {state.groups.get(a, ""), state.groups.get(b, "")}
    if len(crossed) > 1 and crossed & state.uplinks_failed and link.state != LinkStage.PASS:
        # Decided before the uplink was: the uplink explains it, and it is judged there.
        return Verdict("link", f"{a}<->{b}", link.ends, Status.SKIPPED,
                       "not judged on its own: it crosses a switch uplink that fails", tuple(link.evidence),
                       cause=Cause.NOT_JUDGED)
    cause, reason = (link.cause, link.reason) if link.cause is not None else _LINK_PLAIN[link.state]
    return Verdict("link", f"{a}<->{b}", link.ends, _LINK_STATUS[link.state], reason, tuple(link.evidence),
                   cause=cause)


def _uplink(state: FleetKnowledge, sw: str) -> Verdict:
    standing = state.uplinks[sw]
    return Verdict("uplink", f"{sw}<->fabric", (sw,), standing.status, standing.reason,
                   tuple(state.uplink_evidence[sw]), cause=standing.cause)


def _group(run: GroupRun) -> Verdict:
    ev = run.evidence
    assert ev is not None
    what = "full scale" if run.purpose == "scale" else "bisection half"
    return Verdict("group", f"{what} ({len(run.nodes)} nodes)", run.nodes, ev.status,
                   f"{run.finding}: {ev.reason}" if run.finding else ev.reason, (ev,), cause=ev.cause)
