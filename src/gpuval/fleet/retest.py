"""The fleet's targeted re-test of the nodes a job's diagnosis nominated (`gpuval jobs diagnose --retest`): a fleet
check (check.py) on exactly the suspects and their partners, whose verdict alone may take a node out.

- Partners: the nodes named (`--partners`), else idle nodes outside the job that the engine offers now, else the
  job's own other nodes; their tests wait in the queue until the job has ended and let go of them (the check's
  queue timeout bounds that wait).
- The check runs as `gpuval fleet check` does, with its rules (a node suite run twice before a verdict, a suspect
  convicted after failing with known-good partners); no full-scale run (it would test the partners, not the
  suspects).
- Only a suspect that fails its re-test is drained, and its evidence kept, by the fleet's drain (fleet/drains.py,
  through operate.act: the one call that takes a node out and keeps why, so `gpuval fleet retest` can lift it): the
  reason `gpuval: <fault code> <run id>`, whose run id is the diagnosis's (its records name the job); the records
  of that run (the diagnosis's, kind job, and the re-test's, kind fleet) carry the job id. A partner that fails is
  reported, never drained: no job nominated it (a fleet check with --drain decides on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpuval.diagnosis.job_diagnosis import Retest, RetestNode
from gpuval.engines import get_engine, site_for
from gpuval.errors import GpuvalError, UsageError
from gpuval.fleet.check import CheckRequest, prepare
from gpuval.fleet.model import FleetConfig
from gpuval.operate.codes import Acted
from gpuval.fleet.outcome import FleetOutcome, RoundLog
from gpuval.results.model import Status, worst_status

PARTNERS = 2  # idle partners asked for when none are named: two known-good partners convict a suspect's pair test


@dataclass
class RetestRequest:
    """What `--retest` was asked: where, the job and its nodes, the suspects, the partners named (empty: chosen),
    the run id (the diagnosis's: it names the job), and the check's settings."""

    on: str
    options: dict[str, Any]
    job_id: str
    job_nodes: list[str]
    suspects: list[str]
    run_id: str
    partners: list[str] = field(default_factory=list)
    sku: str | None = None
    baselines: tuple[Path, ...] = ()
    size: int | None = None
    cut: float = FleetConfig.cut
    queue_timeout_s: float = 3600.0
    poll_s: float = 10.0
    drain: bool = True
    max_samples: int = FleetConfig.max_samples
    results: Path | None = None


def choose_partners(site: Any, req: RetestRequest) -> tuple[list[str], str]:
    """(the partners, how they were chosen): the named ones, else idle nodes outside the job, else the job's own
    other nodes (their tests queue until the job ends)."""
    if req.partners:
        clash = sorted(set(req.partners) & set(req.suspects))
        if clash:
            raise UsageError(f"--partners {', '.join(clash)}: a suspect cannot be its own known-good partner")
        return list(req.partners), "named with --partners"
    idle = idle_outside(site, req.job_nodes)
    if idle:
        return idle, "idle nodes outside the job"
    own = [n for n in req.job_nodes if n not in req.suspects][:PARTNERS]
    if not own:
        raise UsageError(f"--retest: no partner for {', '.join(req.suspects)}: no idle node and no other node in "
                         f"job {req.job_id}; name one with --partners")
    return own, "the job's own nodes: their tests wait until the job has ended"


def idle_outside(site: Any, job_nodes: list[str]) -> list[str]:
    """Up to PARTNERS idle nodes outside the job. A site picks an exact count or refuses, and may offer the job's
    own nodes (a Kubernetes node a pod runs on is still schedulable): asked for room for those too, then for one
    node fewer each time it refuses, so the idle nodes there are are found whatever their number."""
    for count in range(PARTNERS + len(job_nodes), 0, -1):
        try:
            return [n for n in site.pick(count) if n not in job_nodes][:PARTNERS]
        except GpuvalError:
            continue
    return []


def retest(req: RetestRequest, on_round: Callable[[RoundLog], None] = lambda _log: None) -> Retest:
    """Re-test the suspects with their partners, drain the suspects that fail (with `drain`), store every record
    under the run id; the re-test as the diagnosis reports it."""
    if not req.suspects:
        raise UsageError(f"--retest: job {req.job_id}'s diagnosis nominates no node: nothing to re-test")
    partners, how = choose_partners(site_for(get_engine(req.on, req.options), req.sku), req)
    run = prepare(CheckRequest(
        on=req.on, run_id=req.run_id, nodelist=",".join(dict.fromkeys([*req.suspects, *partners])), sku=req.sku,
        baselines=req.baselines, options=req.options, size=req.size, queue_timeout_s=req.queue_timeout_s,
        poll_s=req.poll_s, config=FleetConfig(cut=req.cut, max_scale_runs=0, max_samples=req.max_samples),
        results=req.results), on_round)
    outcome = run.check(run.nodes, run.site.groups(run.nodes))
    run.conclude(outcome, req.drain, only=req.suspects)  # a partner is never drained here: no job nominated it
    return _summary(outcome, req, partners, how)


def _summary(outcome: FleetOutcome, req: RetestRequest, partners: list[str], how: str) -> Retest:
    acted = {a.node: a for a in outcome.actions}
    nodes = []
    for node, verdict in outcome.verdicts.nodes.items():
        role = "suspect" if node in req.suspects else "partner"
        node_row = RetestNode(node, role, verdict.status, verdict.reason)
        # the diagnosis's page and records take the action as its word: the edge
        if node in acted:
            node_row.action, node_row.detail = acted[node].action.value, acted[node].detail
        elif verdict.status is Status.FAIL and role == "partner":
            node_row.action = Acted.NOT_DRAINED.value
            node_row.detail = (f"failed as a partner; job {req.job_id} did not nominate it (`gpuval fleet check "
                               f"--nodelist {node} --drain` decides)")
        elif verdict.status is Status.FAIL:
            node_row.action, node_row.detail = Acted.NOT_DRAINED.value, "the re-test ran without draining"
        nodes.append(node_row)
    judged = [n.status for n in nodes if n.role == "suspect"] or [Status.ERROR]
    status = worst_status(judged)
    failed = [n.node for n in nodes if n.role == "suspect" and n.status is Status.FAIL]
    shown = ", ".join(f"{n.node} {n.status.value}" for n in nodes if n.role == "suspect")
    reason = f"re-test failed {', '.join(failed)}" if failed else f"no suspect failed its re-test ({shown})"
    notes = [f"partners: {', '.join(partners)} ({how})", *outcome.verdicts.notes]
    return Retest(req.run_id, status, reason, nodes, outcome.verdicts.rounds, notes)
