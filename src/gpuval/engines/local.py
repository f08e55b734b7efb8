"""This machine: the job runs under torchrun or mpirun (or alone) as a detached process group.

Each job gets a folder (job.sh, output.log, exit_code) under the job records folder, named by the job id (the
spec's name and a hash of the spec, chosen in render); `status` reads the exit code the wrapper leaves there,
`cancel` stops the process group. Tested for real (mpirun, torchrun, process groups) in tests/engines/test_local.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, TextIO

from pydantic import Field

from gpuval.engines import records
from gpuval.engines.base import Engine, EngineOptions, Facts, JobUnreachable, Rendered, unique_name, unknown
from gpuval.engines.launch import mpirun_argv, process_argv, torchrun_argv
from gpuval.engines.nodes import this_node
from gpuval.engines.site import Site
from gpuval.node.host import hostname
from gpuval.node.unshadowed import isolated_module_argv
from gpuval.engines.output import file_lines, follow_file
from gpuval.engines.probe import Placement, ProbeCall, ProbeOutput, run_here
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher
from gpuval.errors import EngineError, UsageError

KILL_AFTER_S = 5.0  # how long a cancelled job has to end on SIGTERM before SIGKILL


class LocalOptions(EngineOptions):
    """Options of the local engine (`--opt KEY=VALUE`)."""

    python: str = Field(sys.executable, description="Interpreter that runs gpuval when the job has no image.")
    oversubscribe: bool = Field(True, description="Let mpirun start more ranks than cores (small test machines).")


def _script(spec: JobSpec, options: LocalOptions) -> str:
    argv = process_argv(spec, options.python)
    if spec.launcher is Launcher.MPI:
        extra = ["--oversubscribe"] if options.oversubscribe else []
        if os.geteuid() == 0:
            extra.append("--allow-run-as-root")
        argv = mpirun_argv(spec, argv, spec.procs_per_node, extra)
    elif spec.launcher is Launcher.TORCHRUN:
        argv = torchrun_argv(spec, argv, ["--standalone"], options.python)
    lines = ["#!/bin/bash", f"# gpuval job {spec.name}: {spec.workload or 'command'} on this machine", "set -eo pipefail"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in spec.full_env().items()]
    lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


class LocalEngine(Engine[LocalOptions]):
    """Runs the job on this machine."""

    name = "local"
    Options = LocalOptions
    POLL_S = 1.0  # a status is a file read on this machine: no need to ask less often

    def site(self, sku: str | None = None, switch_label: str | None = None, rack_label: str | None = None) -> Site:
        return Site(self, switch_label, rack_label)  # this machine, one node

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        """job.sh: the environment and the launch line; the job id names the job's folder."""
        if spec.nodes != 1:
            raise UsageError(f"the local engine runs on this machine only: --nodes must be 1 (got {spec.nodes})")
        if spec.image:
            raise UsageError("the local engine runs on the host: drop --image (containers run on slurm/kubernetes)")
        options = self.options_for(spec, facts)
        job_id = unique_name(spec, options)
        workdir = records.jobs_dir() / self.name / job_id
        return Rendered(self.name, {"job.sh": _script(spec, options)}, spec, job_name=job_id, workdir=str(workdir),
                        output=str(workdir / "output.log"))

    def _send(self, rendered: Rendered) -> str:
        """Start job.sh detached; output and exit code land in the job's folder."""
        workdir = Path(str(rendered.workdir))
        if workdir.exists():
            raise EngineError(f"local job {rendered.job_name} was submitted already ({workdir}): the same spec, "
                              "run id included, makes the same job")
        rendered.write(workdir)
        # The wrapper outlives us; it records the exit code so status works after the process is gone.
        wrapper = "bash job.sh > output.log 2>&1; echo $? > exit_code.tmp; mv exit_code.tmp exit_code"
        proc = subprocess.Popen(["bash", "-c", wrapper], cwd=workdir, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (workdir / "pid").write_text(str(proc.pid))
        return rendered.job_name

    def cluster_name(self) -> str:
        """This host (a jobs folder on a home shared between hosts holds other hosts' local jobs too)."""
        return hostname()

    def _workdir(self, job_id: str) -> Path:
        record = self.record(job_id)
        if record is None or not record.workdir:
            raise UsageError(f"no local job {job_id!r} (see {records.jobs_dir() / self.name})")
        return Path(record.workdir)

    def status(self, job_id: str) -> JobStatus:
        """From the exit code file, the cancel mark, or whether the process group still lives."""
        workdir = self._workdir(job_id)
        if (workdir / "cancelled").exists():
            return JobStatus(job_id=job_id, engine=self.name, state=JobState.CANCELLED, native_state="cancelled",
                             source="job folder")
        code_file = workdir / "exit_code"
        if code_file.exists():
            code = int(code_file.read_text().strip() or "1")
            state = JobState.SUCCEEDED if code == 0 else JobState.FAILED
            return JobStatus(job_id=job_id, engine=self.name, state=state, native_state=f"exit {code}",
                             exit_code=code, source="job folder")
        pid = int((workdir / "pid").read_text())
        if _alive(pid):
            return JobStatus(job_id=job_id, engine=self.name, state=JobState.RUNNING, native_state="running",
                             source="process table")
        return unknown(self.name, job_id, f"process {pid} is gone and left no exit code")

    def log_lines(self, job_id: str) -> Iterator[str]:
        """output.log so far, line by line."""
        return file_lines(self._workdir(job_id) / "output.log")

    def node_lines(self, job_id: str) -> Iterator[tuple[str | None, str]]:
        """output.log so far, every line this machine's (engines.nodes.this_node: the name its tasks print)."""
        node = this_node()
        return ((node, line) for line in self.log_lines(job_id))

    def placement(self, job_id: str) -> Placement:
        """This machine, while the job runs; its start is when it was sent (its folder's pid file)."""
        state = self.status(job_id).state
        if state is not JobState.RUNNING:
            raise JobUnreachable(f"could not diagnose local job {job_id}: it is {state.value}, not running")
        sent = (self._workdir(job_id) / "pid").stat().st_mtime
        return Placement([this_node()], datetime.fromtimestamp(sent, timezone.utc))

    def render_probe(self, job_id: str, nodes: list[str], args: list[str]) -> list[ProbeCall]:
        """`gpuval ARGS` as a process of this machine, where the job's ranks are (isolated, from /: run_here)."""
        return [ProbeCall(this_node(), (*isolated_module_argv("gpuval", self.options.python), *args))]

    def _probe(self, call: ProbeCall, timeout_s: float) -> ProbeOutput:
        return run_here(call, timeout_s, "the probe")

    def follow(self, job_id: str, out: TextIO, poll_s: float = 1.0) -> JobStatus:
        """output.log as the job writes it, until the job ends."""
        follow_file(self._workdir(job_id) / "output.log", lambda: self.status(job_id).state.done, out, poll_s)
        return self.status(job_id)

    def cancel(self, job_id: str) -> None:
        """Mark the job cancelled, then stop its process group (SIGTERM, SIGKILL after 5 s)."""
        workdir = self._workdir(job_id)
        pid = int((workdir / "pid").read_text())
        (workdir / "cancelled").touch()
        self.mark_cancelled(job_id)
        try:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + KILL_AFTER_S
            while _group_alive(pid):
                if time.monotonic() > deadline:
                    os.killpg(pid, signal.SIGKILL)
                    return
                time.sleep(0.1)
        except ProcessLookupError:
            return
        except PermissionError as exc:
            raise EngineError(f"cannot stop job {job_id} (process group {pid}): {exc.strerror}") from None


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group lives (a finished wrapper that this process started is reaped first)."""
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:  # not our child: init reaps it
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A finished child of this very process is a zombie until reaped: it still answers kill(0).
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True
