"""Switch uplinks: the group-testing rule of nodes, one level up.

Only cross-switch tests between two cleared nodes count (their nodes are known good, so a failure is the path
between the switches). A cross-switch test that passes clears both switches' uplinks: those are known-good
switches. A switch's uplink fails when most of its cross-switch tests fail (beyond the cut, or crashed), the
median shortfall is beyond the cut, and at least two of the failures are with known-good switches (failing only
with switches that are bad themselves, or never cleared, says nothing about its own uplink). A switch that fails
most of its tests without that is WARN (cannot tell which side), once the tests with failed switches are left
out (they are explained).
When most judged switches would fail, the cause is the fabric (oversubscribed, misrouted), not one uplink: one
fleet-wide finding, and no switch is blamed.
"""

from __future__ import annotations

import math
import statistics

from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.weighing import clears
from gpuval.fleet.plan.terms import Evidence
from gpuval.fleet.plan.knowledge import FleetKnowledge, Standing


def update_uplinks(state: FleetKnowledge) -> None:
    """Recompute every switch uplink's status from the cross-switch evidence so far."""
    cfg = state.config
    evidence = state.uplink_evidence
    judged = {sw: evs for sw, evs in evidence.items() if len(evs) >= cfg.min_uplink_tests}
    good = {sw for sw, evs in evidence.items() if any(e.status == Status.PASS for e in evs)}  # a pass proves both
    failed: set[str] = set()
    for sw, evs in judged.items():
        bad = [e for e in evs if not clears(e, cfg.cut)]
        with_good = [e for e in bad if other_switches(state, e, sw) & good]
        shortfalls = [math.inf if e.shortfall is None else e.shortfall for e in evs]
        if 2 * len(bad) > len(evs) and len(with_good) >= 2 and statistics.median(shortfalls) > cfg.cut:
            failed.add(sw)
    if judged and 2 * len(failed) > len(judged):
        state.cross_finding = (f"{len(failed)} of {len(judged)} switches are slow to every other switch: a "
                               "fleet-wide cause (oversubscribed or misrouted fabric), not one uplink")
        failed = set()
    state.uplinks_failed = failed
    state.uplinks = {sw: _status(state, sw, evs, failed) for sw, evs in evidence.items()}


def _status(state: FleetKnowledge, sw: str, evs: list[Evidence], failed: set[str]) -> Standing:
    cut = state.config.cut
    if sw in failed:
        bad = sum(not clears(e, cut) for e in evs)
        return Standing(Status.FAIL, Cause.SLOW, f"{bad} of {len(evs)} cross-switch tests of its nodes fail, with "
                        "nodes under known-good switches, while its nodes pass inside the switch")
    usable = [e for e in evs if not (other_switches(state, e, sw) & failed)]
    bad = sum(not clears(e, cut) for e in usable)
    if len(usable) < state.config.min_uplink_tests:
        return Standing(Status.SKIPPED, Cause.NOT_JUDGED, f"not judged: {len(usable)} cross-switch tests with "
                        f"switches not found bad (needs {state.config.min_uplink_tests})")
    if 2 * bad > len(usable):
        return Standing(Status.WARN, Cause.UNDECIDED, f"{bad} of {len(usable)} cross-switch tests fail, none or one "
                        "of them with a known-good switch: cannot tell which side is bad")
    return Standing(Status.PASS, Cause.MEASURED, f"{len(usable) - bad} of {len(usable)} cross-switch tests pass")


def other_switches(state: FleetKnowledge, ev: Evidence, sw: str) -> set[str]:
    """The switches of a test's nodes other than `sw`."""
    return {state.groups.get(n, "") for n in ev.test.nodes} - {sw}


def uplink_ok(state: FleetKnowledge, node: str) -> bool:
    """Whether nothing is known against the uplink of `node`'s switch (FAIL and WARN are)."""
    standing = state.uplinks.get(state.groups.get(node, ""))
    return standing is None or standing.status not in (Status.FAIL, Status.WARN)
