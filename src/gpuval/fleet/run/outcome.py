"""What a fleet check ends with: the verdicts, the rounds it took, the exclude list, the drain actions, the exit
code, and `--json`'s shape (node objects with `host` and `status`, links with `hosts`, each with its evidence)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from gpuval.operate.codes import FleetFault
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status, severity
from gpuval.results.verdict import exit_code_of
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.terms import FleetVerdicts, Round, Verdict
from gpuval.fleet.run.records import evidence_json


@dataclass(frozen=True)
class RoundLog:
    """One round as it ran: its tests by purpose, its jobs, its wall time."""

    index: int
    tests: dict[str, int]
    jobs: int
    seconds: float
    dropped: int = 0  # lines not taken: not from the node or test they name, from no task, malformed

    @classmethod
    def of(cls, rnd: Round, jobs: int, seconds: float, dropped: int = 0) -> "RoundLog":
        return cls(rnd.index, dict(Counter(t.purpose for t in rnd.tests)), jobs, seconds, dropped)

    def describe(self) -> str:
        """'round 2: 3 retest in 3 jobs, 14 s'."""
        tests = ", ".join(f"{n} {purpose}" for purpose, n in self.tests.items())
        dropped = f", {self.dropped} line{'s' if self.dropped != 1 else ''} dropped" if self.dropped else ""
        return (f"round {self.index}: {tests} in {self.jobs} job{'s' if self.jobs != 1 else ''}, "
                f"{self.seconds:.0f} s{dropped}")

    def to_json(self) -> dict[str, Any]:
        out = {"round": self.index, "tests": self.tests, "jobs": self.jobs, "seconds": round(self.seconds, 1)}
        return out | ({"dropped": self.dropped} if self.dropped else {})


def with_unavailable(found: FleetVerdicts, away: dict[str, str]) -> FleetVerdicts:
    """The verdicts plus one ERROR per node that could not take a job (never tested: never a hardware verdict)."""
    if not away:
        return found
    nodes = dict(found.nodes)
    for node, why in away.items():
        nodes[node] = Verdict("node", node, (node,), Status.ERROR, f"could not run: not available ({why})",
                              cause=Cause.COULD_NOT_RUN)
    return replace(found, nodes=nodes)


# The causes a node can fail with, each with its code; a verdict of any other cause never fails a node.
_FAULTS = {
    Cause.SLOW: FleetFault.FLEET_SLOW,
    Cause.BROKEN: FleetFault.FLEET_BROKEN,
    Cause.NODE_SLOW: FleetFault.FLEET_NODE_SLOW,
    Cause.NODE_CRASHED: FleetFault.FLEET_NODE_CRASH,
    Cause.HEALTH_FAILED: FleetFault.FLEET_NODE_HEALTH,
    Cause.NVL_DOMAIN: FleetFault.FLEET_NVL_DOMAIN,
    Cause.GPUS_SLOW: FleetFault.FLEET_NODE_SLOW_GPU,
}


def fault_of(cause: Cause) -> FleetFault:
    """The fault code of a node failed for `cause` (operate.codes.FleetFault, append-only); a ValueError for a cause
    no node fails with."""
    try:
        return _FAULTS[cause]
    except KeyError:
        raise ValueError(f"a node is never failed for the cause {cause.value!r}") from None


def fault_codes(v: Verdict, health_codes: list[str]) -> list[str]:
    """What a failed node's drain reason names, from its verdict's cause: its failed health checks' fault codes when
    its health suite convicted it (`health_codes`), else the fleet's code for the cause (operate.codes.FleetFault:
    FLEET_NODE_SLOW / FLEET_NODE_CRASH in its node tests, FLEET_SLOW / FLEET_BROKEN with known-good partners,
    FLEET_NODE_HEALTH for a health failure that named no check, FLEET_NODE_SLOW_GPU for GPU figures under the
    fleet's of its model)."""
    if v.status is not Status.FAIL:
        return []
    if v.cause is Cause.HEALTH_FAILED and health_codes:
        return list(health_codes)
    return [fault_of(v.cause).value]


def _verdict_json(v: Verdict, key: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {key: value, "status": v.status.value, "cause": v.cause.value, "reason": v.reason, **extra,
            "evidence": [evidence_json(e) for e in v.evidence]}


def _worst_first(verdicts: Any) -> list[Verdict]:
    return sorted(verdicts, key=lambda v: (-severity(v.status), v.subject))


@dataclass
class FleetOutcome:
    """The end of a check."""

    run_id: str
    engine: str
    verdicts: FleetVerdicts
    rounds: list[RoundLog]
    unavailable: dict[str, str]
    codes: dict[str, list[str]]
    exclude: str
    actions: list[NodeAction] = field(default_factory=list)  # what --drain did to each failed node

    def all_verdicts(self) -> list[Verdict]:
        found = self.verdicts
        return [*found.nodes.values(), *found.links.values(), *found.uplinks.values(), *found.groups]

    @property
    def failed(self) -> list[str]:
        """The nodes that failed, in the check's order."""
        return [n for n, v in self.verdicts.nodes.items() if v.status is Status.FAIL]

    @property
    def status(self) -> Status:
        """The check's verdict under the exit contract: FAIL when a node, link, uplink or group fails; else ERROR when
        a node could not be checked, SKIPPED when one was not decided, WARN, PASS (SKIPPED with no node at all)."""
        every = [v.status for v in self.all_verdicts()]
        nodes = {v.status for v in self.verdicts.nodes.values()}
        if Status.FAIL in every:
            return Status.FAIL
        for status in (Status.ERROR, Status.SKIPPED):
            if status in nodes:
                return status
        return Status.WARN if Status.WARN in every else Status.PASS if nodes else Status.SKIPPED

    @property
    def exit_code(self) -> int:
        """results.verdict.exit_code_of the check's status: 1 any fail, 2 a node could not run or was not decided,
        else 0."""
        return exit_code_of(self.status)

    def to_json(self) -> dict[str, Any]:
        """`gpuval fleet check --json`: bad nodes and links first."""
        found = self.verdicts
        return {
            "run_id": self.run_id, "engine": self.engine, "status": self.status.value,
            "rounds": found.rounds, "round_log": [r.to_json() for r in self.rounds],
            "nodes": [_verdict_json(v, "host", v.subject, fault_codes=self.codes.get(v.subject, []))
                      for v in _worst_first(found.nodes.values())],
            "links": [_verdict_json(v, "link", v.subject, hosts=list(v.members))
                      for v in _worst_first(found.links.values())],
            "uplinks": [_verdict_json(v, "uplink", v.subject, switch=v.members[0])
                        for v in _worst_first(found.uplinks.values())],
            "groups": [_verdict_json(v, "group", v.subject, hosts=list(v.members)) for v in found.groups],
            "unavailable": self.unavailable, "exclude": self.exclude, "failed": self.failed,
            "actions": [a.to_json() for a in self.actions], "notes": list(found.notes),
        }
