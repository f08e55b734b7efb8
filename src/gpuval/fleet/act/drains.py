"""A fleet check's findings and drains under the drain brake (operate.brake): one process judges many nodes, so it
sees at once what each node acting alone cannot.

- `with_shared_faults`: a fault code on more of the checked nodes than the cap allows (`shared_faults`) is one group
  verdict (cause SHARED_FAULT: "ECC_ERRORS on 240 of 256 nodes"), reported with or without --drain. The nodes keep
  their own FAIL verdicts and records (what each measured stands), and none is drained for that code; a node that
  also fails a code of its own is still drained.
- `with_rack_faults`: more than two trays of one NVL72 rack failing at once (`rack_faults`) is one group verdict
  about the rack (cause RACK: "rack R: 18 trays fail at once"), in place of the planner's verdict of that rack; none
  of those trays is drained, with or without --drain.
- `drain_failed`: the failed nodes drained in the check's order and their evidence kept, through operate.act (the
  one call that takes a node out and keeps why), each new drain let through by the brake while gpuval holds fewer
  than the cap cluster-wide (counted in the scheduler, with what it held before the check), then counted again and
  what the cap has no room for given back. The nodes left in service are one group verdict (cause DRAIN_CAPPED);
  each node's action says what was done and why.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Collection, Mapping

from gpuval.engines.nodes import NodeClient
from gpuval.operate.act import Charge, act_on_verdicts
from gpuval.operate.brake import (
    HOW_TO_PROCEED, SHARED, Brake, DrainCap, rack_faults, rack_reason, shared_faults, shared_reason,
)
from gpuval.operate.evidence import Grounds
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.terms import FleetVerdicts, Verdict
from gpuval.fleet.run.outcome import FleetOutcome

SHOWN = 8  # node names a finding's reason lists (its record lists them all)


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes[:SHOWN]) + (f", ... ({len(nodes)} in all)" if len(nodes) > SHOWN else "")


def _with_note(found: FleetVerdicts, *extra: Verdict) -> FleetVerdicts:
    notes = found.notes if HOW_TO_PROCEED in found.notes else (*found.notes, HOW_TO_PROCEED)
    return replace(found, groups=(*found.groups, *extra), notes=notes)


def _not_racked(codes: Mapping[str, list[str]], found: FleetVerdicts) -> dict[str, list[str]]:
    """The codes of the failed nodes no rack finding covers (a rack's trays are its finding's, not a shared fault's)."""
    racked = rack_faults([n for n in codes if (v := found.nodes.get(n)) and v.status is Status.FAIL], found.racks)
    covered = {n for trays in racked.values() for n in trays}
    return {n: c for n, c in codes.items() if n not in covered}


def with_shared_faults(found: FleetVerdicts, codes: dict[str, list[str]], cap: DrainCap) -> FleetVerdicts:
    """The verdicts plus one group verdict per fault code on more of the checked nodes than `cap` allows (trays a
    rack finding covers left out), and how to proceed as a note (unchanged when no code is)."""
    checked = len(found.nodes)
    shared = shared_faults(_not_racked(codes, found), checked, cap)
    if not shared:
        return found
    return _with_note(found, *(
        Verdict("group", f"{code} on {len(nodes)} of {checked} nodes", tuple(nodes), Status.FAIL,
                f"{code} fails on {len(nodes)} of {checked} nodes at once ({_names(nodes)}), more than the drain "
                f"cap of {cap.describe(checked)}: {SHARED}; no node is drained for it", cause=Cause.SHARED_FAULT)
        for code, nodes in shared.items()))


def with_rack_faults(found: FleetVerdicts) -> FleetVerdicts:
    """The verdicts with one rack finding per NVL72 rack whose failed trays are more than the brake allows
    (`rack_faults`), replacing the planner's verdict of that rack (its reason kept); unchanged when none is."""
    failed = [n for n, v in found.nodes.items() if v.status is Status.FAIL]
    faults = rack_faults(failed, found.racks)
    if not faults:
        return found
    subjects = {f"rack {rack}": trays for rack, trays in faults.items()}
    kept = {g.subject: g for g in found.groups if g.subject in subjects}
    groups = tuple(g for g in found.groups if g.subject not in subjects)
    members = {rack: tuple(n for n, r in found.racks.items() if r == rack) for rack in faults}
    findings = tuple(Verdict("group", subject, members[subject[5:]], Status.FAIL, "; ".join(
        [f"{len(trays)} of its trays fail at once ({_names(trays)}): one rack finding, none drained for it (more "
         "than two: CoreWeave cordons such a rack); look at what they share (the rack's NVLink domain, power, "
         "cooling, a reboot)"] + ([kept[subject].reason] if subject in kept else [])), cause=Cause.RACK)
        for subject, trays in subjects.items())
    return replace(found, groups=(*groups, *findings))


def drain_failed(outcome: FleetOutcome, client: NodeClient, cap: DrainCap, grounds: Mapping[str, Grounds],
                 directory: Path, only: Collection[str] | None = None) -> list[NodeAction]:
    """Take the failed nodes (those of `only` where given: a re-test's suspects) out of the pool and keep why, through
    operate.act (the one call every path makes: the policy drains on Slurm with a reason that starts with "gpuval:",
    taints and labels on Kubernetes, under the drain brake's `cap`; then each one's evidence bundle from its
    `grounds`, in `directory`), and note each action in the outcome; a node the scheduler would not change is noted
    too, and the others are still drained. Nodes left in service by the cap make one DRAIN_CAPPED group verdict;
    what could not be counted or written is a note. Other nodes are left as they are: a fleet check drains, it never
    resumes a node someone else took out."""
    failed = [n for n in outcome.failed if only is None or n in only]
    codes = {n: outcome.codes.get(n, []) for n in failed}
    checked = len(outcome.verdicts.nodes) if only is None else len(failed)
    shared = shared_faults(_not_racked(codes if only is not None else outcome.codes, outcome.verdicts), checked, cap)
    racked = rack_faults(failed, outcome.verdicts.racks)
    charges = [Charge(n, Status.FAIL, codes[n], grounds[n], shared=shared_reason(codes[n], shared, checked)
                      or rack_reason(n, racked, outcome.verdicts.racks)) for n in failed]
    done = act_on_verdicts(charges, client, cap, outcome.run_id, directory)
    notes = [note for note in (done.recount, *done.problems) if note]
    if notes:
        outcome.verdicts = replace(outcome.verdicts, notes=(*outcome.verdicts.notes, *notes))
    outcome.actions = list(done.actions.values())
    _capped_finding(outcome, done.brake, [n for n in done.brake.held_back if not shared_reason(codes[n], shared,
                                                                                                checked)
                                          and not rack_reason(n, racked, outcome.verdicts.racks)])
    return outcome.actions


def _capped_finding(outcome: FleetOutcome, brake: Brake, capped: list[str]) -> None:
    """One DRAIN_CAPPED group verdict for the failed nodes the cap left in service (none for a cap of 0: the user
    asked for a report)."""
    if not capped or brake.cap.count == 0:
        return
    facts: dict[str, Any] = brake.details()
    reason = (f"gpuval holds {facts['held']} nodes drained and its cap is "
              f"{brake.cap.describe(facts['cluster_nodes'] or 0)}: {len(capped)} failed "
              f"node{'s are' if len(capped) != 1 else ' is'} not drained ({_names(capped)}); when many nodes fail at "
              f"once, {SHARED}")
    finding = Verdict("group", f"drain brake: {len(capped)} failed nodes not drained", tuple(capped), Status.FAIL,
                      reason, cause=Cause.DRAIN_CAPPED)
    outcome.verdicts = _with_note(outcome.verdicts, finding)
