"""THE node verdict: one function turns a node's records into its verdict, and one exit contract follows from it.

Every command that judges a node (health and its --drain, validate, burn, train, `submit --wait` and `jobs wait`
(over the job's records, worst with the job's own state), the fleet, Prometheus, the exporter, the report) calls
`node_verdict`; none combines statuses itself (the one status order is results.model.worst_status). The exit
contract, the same for all of them:

    0  pass or warn: everything that applies was judged, nothing failed
    1  any fail: a claim about the hardware (the fault codes name it)
    2  something that applies could not run, or nothing could be decided (and nothing failed)

A failure outranks "could not run": a node with one FAIL and one ERROR is FAIL. "Not judged" is never "pass": a node
whose records are all skipped (or that has none) has the verdict SKIPPED and exits 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED
from gpuval.results.data import HealthData
from gpuval.results.model import Result, Status, worst_status

_EXIT = {Status.PASS: 0, Status.WARN: 0, Status.FAIL: EXIT_FAILED, Status.ERROR: EXIT_CANNOT_RUN,
         Status.SKIPPED: EXIT_CANNOT_RUN}


def exit_code_of(status: Status) -> int:
    """The exit code of a verdict: 0 pass or warn, 1 fail, 2 could not run or not judged."""
    return _EXIT[status]


def fault_codes(record: Result) -> list[str]:
    """The fault codes a failed record stands for: a health record's own (several, space-separated, on the record
    that carries a kept full check's failure), else the record's name."""
    codes = record.data.fault_code.split() if isinstance(record.data, HealthData) else []
    return codes or [record.name]


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict over its records: the status, why, the fault codes of what failed, the names of what
    failed and of what could not run."""

    status: Status
    reason: str
    fault_codes: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    could_not_run: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """The exit contract: 0 pass or warn, 1 fail, 2 could not run or not judged."""
        return exit_code_of(self.status)

    @property
    def judged(self) -> bool:
        """True when the verdict is a claim about the hardware (pass, warn or fail)."""
        return self.status in (Status.PASS, Status.WARN, Status.FAIL)


def _names(records: list[Result], status: Status) -> tuple[str, ...]:
    return tuple(dict.fromkeys(r.name for r in records if r.status is status))


def node_verdict(records: Iterable[Result]) -> NodeVerdict:
    """The verdict of one node from its records (all of one run, or a run and the kept full check it folds in)."""
    chosen = list(records)
    status = worst_status(r.status for r in chosen)  # THE status order (results.model)
    failed, errors = _names(chosen, Status.FAIL), _names(chosen, Status.ERROR)
    codes = tuple(dict.fromkeys(c for r in chosen if r.status is Status.FAIL for c in fault_codes(r)))
    if status is Status.FAIL:
        reason = f"failed: {', '.join(failed)}" + (f"; could not run: {', '.join(errors)}" if errors else "")
    elif status is Status.ERROR:
        reason = f"could not run: {', '.join(errors)} (nothing failed, but the node is not cleared)"
    elif status is Status.SKIPPED:
        reason = "nothing was judged: every check was skipped or none applied"
    else:
        judged = sum(r.status in (Status.PASS, Status.WARN) for r in chosen)
        warned = _names(chosen, Status.WARN)
        reason = f"{judged} judged, within their bands" + (f" (warnings: {', '.join(warned)})" if warned else "")
    return NodeVerdict(status, reason, codes, failed, errors)
