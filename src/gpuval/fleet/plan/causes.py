"""Why a fleet test, node, link, uplink or group stands where it does (`Cause`). Which fault code a failed node's
drain names for its cause is the run's (fleet.run.outcome.fault_of: a `FleetFault`, kept in operate.codes, where the
node policy reads it): the pure planner knows no drain.

Every decision of the check reads a cause, never the words of a reason: a reason is prose for people, free to be
reworded (`tests/fleet/test_causes.py` rewrites every reason and gets the same verdicts and codes).

Cause, like FleetFault, is APPEND ONLY, as DCGM's DCGM_FR_* failure codes are: a value, once released, keeps its
name and its place. A cause is stored in the check's records and `--json`: renaming, removing or reordering a member
strands what an earlier gpuval wrote. Add new members at the end; `tests/fleet/test_causes.py` pins the released
ones.
"""

from __future__ import annotations

from enum import Enum


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
      RACK            a finding about an NVL72 rack as a whole (its NVLink domain fails everywhere or only at full
                      size, or more than two of its trays fail at once): one finding, no tray drained for it
      FELL_BACK       NCCL's log of a rack's all_reduce does not show multi-node NVLink and NVLS in use: never a pass
      AFTER_REBOOT    NVLink or the fabric down within the settle time of the node's boot: re-checked after it,
                      never a conviction on its own (NVIDIA/NVSentinel#1715)
      NVL_DOMAIN      a tray whose NVLink domain (ClusterUUID.CliqueId) is not its rack's
    Both (a node test's evidence, then a node's verdict):
      GPUS_SLOW       its health suite's figures (GEMM, HBM, host copies, ...) fall under those of the fleet's other
                      nodes of its GPU model (node_figures.py): in a node test; a node, in its node suite and again
                      on its re-run
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
    RACK = "rack"
    FELL_BACK = "fell back"
    AFTER_REBOOT = "after reboot"
    NVL_DOMAIN = "nvlink domain"
    GPUS_SLOW = "gpus slow"
