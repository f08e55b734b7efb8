"""Why a fleet test, node, link, uplink or group stands where it does (`Cause`), and which fault code a failed node's
drain names for its cause (`fault_of`: a `FleetFault`, kept in operate.codes, where the node policy reads it).

Every decision of the check reads a cause, never the words of a reason: a reason is prose for people, free to be
reworded (`tests/fleet/test_causes.py` rewrites every reason and gets the same verdicts and codes).

Cause, like FleetFault, is APPEND ONLY, as DCGM's DCGM_FR_* failure codes are: a value, once released, keeps its
name and its place. A cause is stored in the check's records and `--json`: renaming, removing or reordering a member
strands what an earlier gpuval wrote. Add new members at the end; `tests/fleet/test_causes.py` pins the released
ones.
"""

from __future__ import annotations

from enum import Enum

from gpuval.operate.codes import FleetFault


class Cause(str, Enum):
    """Why a test's evidence or a verdict has its status (the status says how bad; the cause says why).

    Evidence (one test):
      MEASURED        its figures were judged (the status says how they came out: pass, not sure)
      SLOW            its figures fail (beyond the cut, or under the SKU's fail limit)
      CRASHED         it ran and failed: a crash, a hang, wrong results
      COULD_NOT_RUN   the engine refused it, it stayed queued, no figure came back: never a hardware verdict
      NOT_JUDGED      nothing to judge its figures against
      HEALTH_FAILED   its node's health suite failed (a node test)
      HEALTH_NOT_RUN  a check of its node's health suite could not run (its figures, if any, are still judged)
      HEALTH_WARNS    its node's health suite warns (its figures are judged)
    Verdicts (a node, link, switch uplink or group) use the same words, and these:
      NODE_SLOW       a node convicted by its own node tests' figures
      NODE_CRASHED    a node convicted by its own node tests crashing
      BROKEN          a node convicted by crashes with known-good partners (SLOW: by its figures with them)
      UNDECIDED       its tests did not settle (out of re-tests, no known-good partner, which side of an uplink)
      FAILED_ONCE     it failed once and passed on a re-run (flaky?)
      FLEET_WIDE      a shortfall of every node or every switch: configuration or fabric, not one node
      SHARED_FAULT    one fault code on more of the checked nodes than the drain cap allows: what they share (a
                      baseline, the software, a shared part), not that many broken nodes; none drained for it
      DRAIN_CAPPED    failed nodes left in service because gpuval holds the drain cap's worth of nodes drained
    """

    MEASURED = "measured"
    SLOW = "slow"
    CRASHED = "crashed"
    COULD_NOT_RUN = "could not run"
    NOT_JUDGED = "not judged"
    HEALTH_FAILED = "health failed"
    HEALTH_NOT_RUN = "health not run"
    HEALTH_WARNS = "health warns"
    NODE_SLOW = "node slow"
    NODE_CRASHED = "node crashed"
    BROKEN = "broken"
    UNDECIDED = "undecided"
    FAILED_ONCE = "failed once"
    FLEET_WIDE = "fleet wide"
    SHARED_FAULT = "shared fault"
    DRAIN_CAPPED = "drain capped"


# The causes a node can fail with, each with its code; a verdict of any other cause never fails a node.
_FAULTS = {
    Cause.SLOW: FleetFault.FLEET_SLOW,
    Cause.BROKEN: FleetFault.FLEET_BROKEN,
    Cause.NODE_SLOW: FleetFault.FLEET_NODE_SLOW,
    Cause.NODE_CRASHED: FleetFault.FLEET_NODE_CRASH,
    Cause.HEALTH_FAILED: FleetFault.FLEET_NODE_HEALTH,
}


def fault_of(cause: Cause) -> FleetFault:
    """The fault code of a node failed for `cause`; a ValueError for a cause no node fails with."""
    try:
        return _FAULTS[cause]
    except KeyError:
        raise ValueError(f"a node is never failed for the cause {cause.value!r}") from None
