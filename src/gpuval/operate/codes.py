"""The typed words of acting on a node: the fault codes a fleet drain names (`FleetFault`) and what was done to a
node (`Acted`, carried by operate.node_state's NodeAction from the policy to the evidence bundle and the re-test).

FleetFault is APPEND ONLY, as DCGM's DCGM_FR_* failure codes are: a value, once released, keeps its name and its
place. It is written into a Slurm drain reason (`gpuval: FLEET_SLOW RUN`) or a Kubernetes annotation and read back
by a later gpuval (operate.node_state: a drain is lifted only by a run that re-checks each of its codes; operate.held:
which run that is), so renaming, removing or reordering a member strands what an earlier gpuval wrote
(tests/fleet/test_causes.py pins the released members). Which verdict cause gives which code is the fleet's
(`gpuval.fleet.run.outcome.fault_of`); the codes live here, below the fleet, so that operate/ reads them as this enum
and never by a prefix.

Acted is a plain Enum, not a string: a decision made on what was done reads a member (`action.took_out`), and a
comparison with a word would be False, never silently right. Its value is the word people and `--json` see (str()
gives it), written only at the edge (`NodeAction.to_json`, the bundle, a record).
"""

from __future__ import annotations

from enum import Enum


class FleetFault(str, Enum):
    """The fault codes of a node the fleet check failed: what `--drain` writes and `--json`'s `fault_codes` shows
    (a node its health suite failed names its failed checks' own codes instead, when it has them). APPEND ONLY."""

    FLEET_SLOW = "FLEET_SLOW"  # slow with two known-good partners
    FLEET_BROKEN = "FLEET_BROKEN"  # crashed with two known-good partners
    FLEET_NODE_SLOW = "FLEET_NODE_SLOW"  # its own node tests are slow (health suite, in-node all_reduce)
    FLEET_NODE_CRASH = "FLEET_NODE_CRASH"  # its own node tests crashed twice
    FLEET_NODE_HEALTH = "FLEET_NODE_HEALTH"  # its health suite failed, and no failed check's code came back
    FLEET_NVL_DOMAIN = "FLEET_NVL_DOMAIN"  # an NVL72 tray whose NVLink domain is not its rack's
    FLEET_NODE_SLOW_GPU = "FLEET_NODE_SLOW_GPU"  # its suite's GPU figures under the fleet's nodes of its GPU model


FLEET_CODES = tuple(f.value for f in FleetFault)


def is_fleet_code(code: str) -> bool:
    """Whether `code` is one of the fleet's codes (which only a fleet re-test re-checks)."""
    return code in FLEET_CODES


class Acted(Enum):
    """What was done to one node (its NodeAction's `action`).

    DRAINED / TAINTED       taken out of service now, gpuval's mark naming this run (Slurm drain, Kubernetes taint);
                            also a drain the brake would give back that another run wrote since: it stays
    RESUMED / UNTAINTED     gpuval's own drain or taint lifted by a run that re-checked every code of it
    UNCHANGED               left as it was (nothing judged, someone else's drain, already held for these codes, a
                            hold: the detail says which)
    NOT_DRAINED/NOT_TAINTED a failed node left in service: the drain brake held it back or gave it back, a shared
                            fault, a partner no job nominated, or the scheduler refused (the detail says why)
    NOT_GIVEN_BACK          a drain the brake would give back, which the scheduler refused to lift: it stays
    LIFTED                  a held node whose re-test passed, back in service (`gpuval fleet retest`)
    KEPT                    a held node that stays out of service after its re-test (failed, not re-tested, no bundle)
    """

    DRAINED = "drained"
    TAINTED = "tainted"
    RESUMED = "resumed"
    UNTAINTED = "untainted"
    UNCHANGED = "unchanged"
    NOT_DRAINED = "not drained"
    NOT_TAINTED = "not tainted"
    NOT_GIVEN_BACK = "not given back"
    LIFTED = "lifted"
    KEPT = "kept drained"

    def __str__(self) -> str:
        return self.value

    @property
    def took_out(self) -> bool:
        """This action put gpuval's mark on the node now (a new drain or taint: what the brake counts as its own)."""
        return self in (Acted.DRAINED, Acted.TAINTED)

    @property
    def out_of_service(self) -> bool:
        """The node is held out of service by gpuval after this action (for UNCHANGED the detail says how it is)."""
        return self in (Acted.DRAINED, Acted.TAINTED, Acted.NOT_GIVEN_BACK, Acted.KEPT)

    @property
    def lifted(self) -> bool:
        """gpuval's drain or taint came off the node."""
        return self in (Acted.RESUMED, Acted.UNTAINTED, Acted.LIFTED)

    @property
    def held_back(self) -> bool:
        """A failed node this action left in service."""
        return self in (Acted.NOT_DRAINED, Acted.NOT_TAINTED)
