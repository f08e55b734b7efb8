"""Running a command inside a running job, on each of its nodes: what `gpuval jobs diagnose` uses to ask every node
of a job about the job's ranks there (`gpuval jobs probe`). One shape for every engine (engines/base.py):

    placement(job_id)                   where the job runs now, as its scheduler says: its nodes, its start
    render_probe(job_id, nodes, args)   the calls, one per node (what --dry-run prints)
    probe_nodes(job_id, nodes, args)    send them (16 at a time), each node's output lines or why there are none

- Slurm: a step inside the job's allocation, `srun --jobid JOB --overlap --nodelist NODE --chdir=/` (a job run in a
  pyxis container: in that named container);
- Kubernetes: an exec in the job's pod on that node (the API server's pods/exec, as `kubectl exec`);
- local: the command here, the one node, run from /.

The probe runs with the caller's rights (on Slurm the job's owner, the only user Slurm lets start a step in it; an
operator may run it as root), so nothing of the folder it starts in may shape it: gpuval runs as `python -I -m
gpuval` (node/unshadowed.py isolated_module_argv: neither the working folder nor PYTHON* variables reach sys.path)
from /, never from the caller's folder or slurmstepd's /tmp fallback, where anyone may have put a `gpuval/` package.
Azure ML is refused: it names no node of its compute and runs nothing inside a running job.

Each call's output is attributed to the node the call was sent to (the scheduler placed it there), never to what
the output says.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from datetime import datetime

from gpuval.engines.output import text_lines

PROBE_TIMEOUT_S = 120.0  # one node's answer: the probe's own limits (py-spy, RAS) plus start-up
PROBE_WIDTH = 16  # nodes asked at once


@dataclass(frozen=True)
class Placement:
    """Where a running job runs, as its scheduler says: its nodes, when it started (None: not said) and the uid of
    the user it runs as (None: not said; the probe then reads its own user's ranks)."""

    nodes: list[str]
    started_at: datetime | None = None
    owner_uid: int | None = None


@dataclass(frozen=True)
class ProbeCall:
    """One command run inside a job on one of its nodes: `argv` as it is sent; `where` the engine's target for it
    where argv does not say it (a pod's namespace, name and container)."""

    node: str
    argv: tuple[str, ...]
    where: tuple[tuple[str, str], ...] = ()

    def target(self, key: str) -> str:
        """One part of `where` ('' when absent)."""
        return dict(self.where).get(key, "")

    def text(self) -> str:
        """The call for people (the dry run)."""
        at = ", ".join(f"{k} {v}" for k, v in self.where)
        return f"# {self.node}" + (f" ({at})" if at else "") + "\n" + shlex.join(self.argv) + "\n"


@dataclass
class ProbeOutput:
    """What came back from one node: its lines, and why nothing (or not all) came back ('' when it answered)."""

    node: str
    lines: list[str] = field(default_factory=list)
    problem: str = ""


def answered(node: str, out: str, err: str, code: int | None, what: str, timeout_s: float) -> ProbeOutput:
    """A call's standard output as the node's lines (split at newlines only); an exit other than 0 (`code` None:
    it did not end within `timeout_s`) is the node's problem, in one line: `what` names the call, then the first
    line of complaint."""
    lines = text_lines(out)
    if code == 0:
        return ProbeOutput(node, lines)
    said = next((line.strip() for line in text_lines(err + out)
                 if line.strip() and not line.startswith(("gpuval-", "{"))), "")
    why = f"exit {code}" if code is not None else f"no end in {timeout_s:.0f} s"
    return ProbeOutput(node, lines, f"{what}: {why}" + (f": {said[:300]}" if said else ""))


def run_here(call: ProbeCall, timeout_s: float, what: str) -> ProbeOutput:
    """Run a call's argv as a process of this machine (the local engine's probe), from /, and take its output."""
    try:
        proc = subprocess.run(list(call.argv), capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, cwd="/")
    except FileNotFoundError:
        return ProbeOutput(call.node, problem=f"{what}: {call.argv[0]} not found")
    except subprocess.TimeoutExpired:
        return ProbeOutput(call.node, problem=f"{what}: no answer in {timeout_s:.0f} s")
    return answered(call.node, proc.stdout, proc.stderr, proc.returncode, what, timeout_s)
