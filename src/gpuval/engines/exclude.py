"""Moving a running job off nodes (`gpuval jobs diagnose --exclude`): one shape for every engine (engines/base.py),
the render apart from the send as for jobs and probes:

    render_exclude(job_id, nodes)   what would be done: each step as it is sent (a Slurm command, a Kubernetes API
                                    call), or, where the engine may not move the job, why and what its user does
                                    instead (the exact exclude list, the command or the lines to add)
    exclude(job_id, nodes)          send exactly those steps, in order

- Slurm requeues a batch job that allows it (`scontrol requeuehold`, `scontrol update ExcNodeList=`, `scontrol
  release`: the node list may change only while the job is pending); Slurm starts it again, off those nodes, once
  its requeue delay has passed.
- Kubernetes: a nodeAffinity on the job's pod templates that keeps its pods off those nodes, then the job's pods on
  them deleted, so that its controller makes them again elsewhere (only for a Kubeflow job gpuval sent: a started
  batch Job's pod template cannot change, and gpuval changes only what it made).

An exclusion is asked for by the user (`--exclude`), never done on a diagnosis alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuval.results.model import Status


@dataclass(frozen=True)
class ExcludeStep:
    """One step of an exclusion as it is sent: a command line (`argv`), or an API call (`verb` on the object
    `target` names, with `body`); `what` says it for people."""

    what: str
    argv: tuple[str, ...] = ()
    verb: str = ""
    target: tuple[tuple[str, str], ...] = ()  # (kind, ...), (namespace, ...), (name, ...), (uid, ...)
    body: dict[str, Any] | None = None

    def at(self, key: str) -> str:
        """One part of `target` ('' when absent)."""
        return dict(self.target).get(key, "")


@dataclass
class Exclusion:
    """Moving job `job_id` off `nodes`: the nodes it is kept off once done (`excluded`: those it already avoided and
    these), the steps, or the `advice` where the engine may not move it (nothing is sent); after a send, `sent`, or
    the `problem` that stopped it (nothing after the step that failed was sent)."""

    job_id: str
    engine: str
    nodes: list[str]
    excluded: list[str] = field(default_factory=list)
    steps: list[ExcludeStep] = field(default_factory=list)
    advice: str = ""
    sent: bool = False
    problem: str = ""

    @property
    def status(self) -> Status:
        """PASS once sent whole; ERROR where it was not (the engine may not, or refused a step): could not act."""
        return Status.PASS if self.sent and not self.problem else Status.ERROR

    def summary(self) -> str:
        """One line for people: what was done, or why nothing was, and what to do."""
        what = "; ".join(s.what for s in self.steps)
        if self.problem:
            return f"not done: {self.problem}" + (f" (the steps: {what})" if what else "")
        if self.advice:
            return f"not done: {self.advice}"
        return f"{'done' if self.sent else 'would do'}: {what}"
