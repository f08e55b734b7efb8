"""A fleet check's findings and drains under the drain brake (operate.brake): one process judges many nodes, so it
sees at once what each node acting alone cannot.

- `with_shared_faults`: a fault code on more of the checked nodes than the cap allows (`shared_faults`) is one group
  verdict (cause SHARED_FAULT: "ECC_ERRORS on 240 of 256 nodes"), reported with or without --drain. The nodes keep
  their own FAIL verdicts and records (what each measured stands), and none is drained for that code; a node that
  also fails a code of its own is still drained.
- `drain_failed`: the failed nodes drained in the check's order through operate.node_state, each new drain let
  through by the brake while gpuval holds fewer than the cap cluster-wide (counted in the scheduler, with what it
  held before the check), then counted again and what the cap has no room for given back. The nodes left in service
  are one group verdict (cause DRAIN_CAPPED); each node's action says what was done and why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuval.engines.nodes import NodeClient
from gpuval.errors import GpuvalError
from gpuval.operate.brake import HOW_TO_PROCEED, SHARED, Brake, DrainCap, shared_faults, shared_reason
from gpuval.operate.node_state import NodeAction, apply
from gpuval.results.model import Status
from gpuval.fleet.causes import Cause
from gpuval.fleet.model import FleetVerdicts, Verdict
from gpuval.fleet.outcome import FleetOutcome

SHOWN = 8  # node names a finding's reason lists (its record lists them all)


def _names(nodes: list[str]) -> str:
    return ", ".join(nodes[:SHOWN]) + (f", ... ({len(nodes)} in all)" if len(nodes) > SHOWN else "")


def _with_note(found: FleetVerdicts, *extra: Verdict) -> FleetVerdicts:
    notes = found.notes if HOW_TO_PROCEED in found.notes else (*found.notes, HOW_TO_PROCEED)
    return replace(found, groups=(*found.groups, *extra), notes=notes)


def with_shared_faults(found: FleetVerdicts, codes: dict[str, list[str]], cap: DrainCap) -> FleetVerdicts:
    """The verdicts plus one group verdict per fault code on more of the checked nodes than `cap` allows, and how
    to proceed as a note (unchanged when no code is)."""
    checked = len(found.nodes)
    shared = shared_faults(codes, checked, cap)
    if not shared:
        return found
    return _with_note(found, *(
        Verdict("group", f"{code} on {len(nodes)} of {checked} nodes", tuple(nodes), Status.FAIL,
                f"{code} fails on {len(nodes)} of {checked} nodes at once ({_names(nodes)}), more than the drain "
                f"cap of {cap.describe(checked)}: {SHARED}; no node is drained for it", cause=Cause.SHARED_FAULT)
        for code, nodes in shared.items()))


def drain_failed(outcome: FleetOutcome, client: NodeClient, cap: DrainCap) -> list[dict[str, str]]:
    """Take the failed nodes out of the pool through operate.node_state and `client` (Slurm: drained with a reason
    that starts with "gpuval:"; Kubernetes: labelled and tainted) under the drain brake's `cap`, and note each
    action in the outcome; a node the scheduler would not change is noted too, and the others are still drained.
    Nodes left in service by the cap make one DRAIN_CAPPED group verdict. Other nodes are left as they are: a
    fleet check drains, it never resumes a node someone else took out."""
    checked = len(outcome.verdicts.nodes)
    shared = shared_faults(outcome.codes, checked, cap)
    brake = Brake(client, cap, outcome.run_id)
    done: dict[str, NodeAction | dict[str, str]] = {}
    for node in outcome.failed:
        codes = outcome.codes.get(node, [])
        try:
            done[node] = apply(Status.FAIL, node, outcome.run_id, codes, client,
                               admit=brake.gate(node, shared_reason(codes, shared, checked)))
        except GpuvalError as exc:
            done[node] = {"scheduler": client.scheduler, "node": node, "verdict": Status.FAIL.value,
                          "action": "not drained", "detail": str(exc)}
    try:
        done.update(brake.settle([a for a in done.values() if isinstance(a, NodeAction)]))
    except GpuvalError as exc:  # drained, and the second count failed: the drains stand, said
        outcome.verdicts = replace(outcome.verdicts, notes=(*outcome.verdicts.notes, f"the drain brake could not "
                                                            f"count gpuval's drains again after draining: {exc}"))
    outcome.actions = [a.to_json() if isinstance(a, NodeAction) else a for a in done.values()]
    _capped_finding(outcome, brake, [n for n in brake.held_back if not shared_reason(outcome.codes.get(n, []),
                                                                                      shared, checked)])
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
