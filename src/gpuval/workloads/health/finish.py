"""What follows a health run: the node action (`health --drain`) and the evidence of a failure first, through the one
call that takes a node out and keeps why (operate.act), then what was left to save.

The order is the point: no metrics file, report or store write may delay or prevent the action. The action runs
under the node's lock (last_full.node_lock), with the kept full result read again right before it (a full check may
have kept a failure since this run read it: a pass then lifts nothing); the records the run deferred (the store,
which another writer may hold for minutes) and the node_exporter textfile are written after, each failure one
line that names the file, never an end to the run.

A new drain goes through the drain brake (operate.brake): gpuval counts what it holds drained cluster-wide before
it drains this node, and again after; a node it holds back or gives back keeps its FAIL verdict and gets one more
record, `drain_brake` (status error: the drain could not be done), whose reason is the finding."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuval.checks.base import CheckResult
from gpuval.engines.nodes import NodeClient
from gpuval.errors import GpuvalError
from gpuval.operate import node_state, prometheus
from gpuval.operate.act import act_on_verdicts, records_charge
from gpuval.operate.brake import Brake, DrainCap, site_cap
from gpuval.operate.evidence import Grounds
from gpuval.results.model import Result, Status
from gpuval.workloads.health import last_full
from gpuval.workloads.health.records import health_record
from gpuval.workloads.health.run import HealthRun

BRAKE_RECORD = "drain_brake"  # the record of a drain the brake held back (fault code DRAIN_BRAKE)


@dataclass
class Finish:
    """The node action (None when none was asked, or it failed: `action_error` says why) and what could not be
    written after it (one line each)."""

    action: node_state.NodeAction | None = None
    action_error: str = ""
    problems: list[str] = field(default_factory=list)
    evidence: Path | None = None  # the bundle of a failed node (operate.evidence)


def act_on_node(run: HealthRun, client: NodeClient, cap: DrainCap | None = None) -> Finish:
    """Drain, resume, taint or untaint the run's node by its verdict and keep a failure's evidence bundle
    (operate.act, the one call that takes a node out and keeps why), under the node's lock and with the kept full
    result read again, through the scheduler's `client`; a new drain under the drain brake's `cap` [default: the
    site's] (a node held back gets the `drain_brake` record); a scheduler that refuses is `action_error`, a bundle
    not written a line in `problems`."""
    run_id = run.action_run_id()
    try:
        with last_full.node_lock(run.node) as locked:
            hold, rechecked = run.recheck(locked)
            grounds = Grounds(str(run.records[0].params.get("machine") or run.node) if run.records else run.node,
                              [r.name for r in run.records], run.records, machine=run.ctx.machine)
            done = act_on_verdicts([records_charge(run.records, run.node, grounds, hold, rechecked)],
                                   client, cap or site_cap(None), run_id, last_full.state_dir())
    except GpuvalError as exc:  # the records are kept (saved, printed); the action's failure is the exit
        return Finish(action_error=f"node {run.node}: {exc}")
    refused = done.failed.get(run.node) or done.recount
    if refused:
        return Finish(action_error=f"node {run.node}: {refused}", problems=done.problems,
                      evidence=done.bundles.get(run.node))
    if run.node in done.brake.held_back and run.records:
        run.records.append(brake_record(run, done.brake))
    return Finish(done.actions[run.node], problems=done.problems, evidence=done.bundles.get(run.node))


def brake_record(run: HealthRun, brake: Brake) -> Result:
    """The finding of a drain the brake held back, as one more record of the run (status error: the drain could
    not be done; the node's own verdict stands)."""
    codes = list(run.verdict.fault_codes)
    why, advice = brake.held_back[run.node], brake.advice(run.node, codes)
    finding = CheckResult(name=BRAKE_RECORD, status=Status.ERROR, fault_code="DRAIN_BRAKE",
                          value=brake.details()["held"], expected=brake.limit, unit="nodes",
                          reason=f"{why}; {advice}" if advice else why,
                          details={**brake.details(), "fault_codes": codes, "advice": advice})
    first = run.records[0]
    return health_record(finding, first.where, first.run_id, first.started_at, first.params)


def finish_run(run: HealthRun, client: NodeClient | None, textfile: Path | None,
               cap: DrainCap | None = None) -> Finish:
    """The node action when the scheduler's `client` is given (`health --drain`, new drains under `cap`), the
    evidence of a failure, then the records left for after it and the metrics `textfile`: best effort, each failure
    a line in `problems` (the verdict and the action stand)."""
    done = act_on_node(run, client, cap) if client else Finish()
    done.problems += [p for p in [run.finish_saving()] if p]
    if textfile:
        try:
            prometheus.write_textfile(run.records, textfile)
        except OSError as exc:
            done.problems.append(f"--prometheus {exc.filename or textfile}: {exc.strerror or exc}")
    return done
