"""What follows a health run: the node action (`health --drain`) first, the evidence of a failure next, then what
was left to save.

The order is the point: no metrics file, report or store write may delay or prevent the action. The action runs
under the node's lock (last_full.node_lock), with the kept full result read again right before it (a full check may
have kept a failure since this run read it: a pass then lifts nothing); the records the run deferred (the store,
which another writer may hold for minutes) and the node_exporter textfile are written after, each failure one
line that names the file, never an end to the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuval.errors import GpuvalError
from gpuval.operate import evidence, node_state, prometheus
from gpuval.results.model import Status
from gpuval.workloads.health import last_full
from gpuval.workloads.health.run import HealthRun


@dataclass
class Finish:
    """The node action (None when none was asked, or it failed: `action_error` says why) and what could not be
    written after it (one line each)."""

    action: node_state.NodeAction | None = None
    action_error: str = ""
    problems: list[str] = field(default_factory=list)
    evidence: Path | None = None  # the bundle of a failed node (operate.evidence)


def act_on_node(run: HealthRun, scheduler: str) -> Finish:
    """Drain, resume, taint or untaint the run's node by its verdict (operate.node_state's rule), under the node's
    lock and with the kept full result read again; a scheduler that refuses is `action_error`."""
    try:
        with last_full.node_lock(run.node) as locked:
            hold, rechecked = run.recheck(locked)
            action = node_state.apply_results(run.records, run.node, scheduler, run.action_run_id(), hold=hold,
                                              rechecked=rechecked)
    except GpuvalError as exc:  # the records are kept (saved, printed); the action's failure is the exit
        return Finish(action_error=f"node {run.node}: {exc}")
    return Finish(action)


def keep_evidence(run: HealthRun, done: Finish) -> None:
    """A failed node's evidence bundle, after its node action (operate.evidence: the machine as a recording, the
    failing records, nvidia-smi -q) in the node's state directory; a write that fails is one line in `problems`."""
    action = done.action
    if action is None or action.verdict is not Status.FAIL:
        return
    try:
        done.evidence = evidence.write_bundle(
            last_full.state_dir(), run.ctx.machine, str(run.records[0].params.get("machine") or run.node),
            evidence.Conviction(run.action_run_id(), [r.name for r in run.records], run.records, action))
    except (OSError, GpuvalError) as exc:
        done.problems.append(f"evidence of node {run.node}: {getattr(exc, 'strerror', None) or exc}")


def finish_run(run: HealthRun, scheduler: str | None, textfile: Path | None) -> Finish:
    """The node action when `scheduler` is given (`health --drain`), the evidence of a failure, then the records
    left for after it and the metrics `textfile`: best effort, each failure a line in `problems` (the verdict and
    the action stand)."""
    done = act_on_node(run, scheduler) if scheduler else Finish()
    keep_evidence(run, done)
    done.problems += [p for p in [run.finish_saving()] if p]
    if textfile:
        try:
            prometheus.write_textfile(run.records, textfile)
        except OSError as exc:
            done.problems.append(f"--prometheus {exc.filename or textfile}: {exc.strerror or exc}")
    return done
