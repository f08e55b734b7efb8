"""Slurm: an sbatch script (pyxis/enroot containers when the job has an image), `sbatch --parsable`, and the
job's state from `squeue --json`, else `sacct`, else the job-completion record (JobCompType=jobcomp/filetxt).

Everything a user typed reaches the script through shlex.quote, or is refused by a name check (partition,
account), so no value can run shell code. Slurm's JSON changed between versions (job_state a string in 22.05,
a list since 23.02; numbers sometimes {"set":..., "number":...}): the readers accept both.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from gpuval.engines import records
from gpuval.engines.base import Engine, EngineOptions, Rendered, unknown
from gpuval.engines.binding import srun_cpu_bind
from gpuval.engines.launch import (
    SOURCE_IN_CONTAINER, gpuval_source, install_gpuval_argv, process_argv, torchrun_argv,
)
from gpuval.engines.spec import JobSpec, JobState, JobStatus, Launcher
from gpuval.errors import EngineError, MissingDependency, UsageError

_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")

# Slurm's job states (squeue, sacct, jobcomp) to the normalized set.
_STATES = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "SUSPENDED": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING, "SIGNALING": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "FAILED": JobState.FAILED, "TIMEOUT": JobState.FAILED, "NODE_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED, "BOOT_FAIL": JobState.FAILED, "DEADLINE": JobState.FAILED,
    "PREEMPTED": JobState.FAILED, "SPECIAL_EXIT": JobState.FAILED,
}


class SlurmOptions(EngineOptions):
    """Options of the Slurm engine (`--opt KEY=VALUE`, or JobSpec.extras["slurm"])."""

    partition: str | None = Field(None, description="sbatch --partition.")
    account: str | None = Field(None, description="sbatch --account.")
    exclusive: bool | None = Field(None, description="sbatch --exclusive: whole nodes, what a benchmark wants "
                                                     "[default: yes when the job uses GPUs].")
    workdir: str | None = Field(None, description="Folder for job.sbatch and the output file [default: a folder "
                                                  "per job under gpuval's jobs folder; must be on a shared file system].")
    python: str = Field(sys.executable, description="Interpreter that runs gpuval when the job has no image.")
    mpi: str = Field("pmix", description="srun --mpi plugin for MPI workloads.")
    cpu_bind: str | None = Field(None, description="srun --cpu-bind [default: one mask per rank from the pinning "
                                                  "plan of the SKU's recorded layout, else cores].")
    container_name: str | None = Field(None, description="pyxis --container-name [default: the job name].")
    warmup: bool = Field(True, description="With an image: import the container once per node before the run "
                                            "(and install gpuval into it for gpuval's own workloads).")
    source: str | None = Field(default_factory=lambda: str(gpuval_source() or "") or None,
                               description="gpuval checkout on the shared file system, mounted into the container to "
                                           "install gpuval from [default: this gpuval's checkout; none: from PyPI].")
    master_port: int | None = Field(None, description="torchrun rendezvous port [default: derived from the job id].")

    @field_validator("partition", "account", "container_name")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_NAME.match(value):
            raise ValueError(f"{value!r} is not a Slurm name (letters, digits, _ . + -)")
        return value


def _directives(spec: JobSpec, options: SlurmOptions, output: str) -> list[str]:
    lines = [
        f"--job-name={spec.name}",
        f"--nodes={spec.nodes}",
        f"--ntasks-per-node={spec.procs_per_node}",
    ]
    if spec.cpus_per_proc:
        lines.append(f"--cpus-per-task={spec.cpus_per_proc}")
    if spec.gpus_per_node:
        lines.append(f"--gpus-per-node={spec.gpus_per_node}")
    if options.exclusive or (options.exclusive is None and spec.gpus_per_node):
        lines.append("--exclusive")
    if spec.time_limit_min:
        lines.append(f"--time={spec.time_limit_min}")
    if options.partition:
        lines.append(f"--partition={options.partition}")
    if options.account:
        lines.append(f"--account={options.account}")
    lines.append(f"--output={output}")
    return [f"#SBATCH {shlex.quote(line)}" for line in lines]


def _container_flags(spec: JobSpec, options: SlurmOptions, image: bool = True) -> list[str]:
    """pyxis options; after the warm-up step the named container exists and the image is not named again."""
    if not spec.image:
        return []
    flags = [f"--container-image={spec.image}"] if image else []
    flags.append(f"--container-name={options.container_name or spec.name}")
    mounts = [str(m) for m in spec.mounts] + (list(spec.network.mounts) if spec.network else [])
    if _installs_gpuval(spec, options) and options.source:
        mounts.append(f"{options.source}:{SOURCE_IN_CONTAINER}")
    if mounts:
        flags.append(f"--container-mounts={','.join(dict.fromkeys(mounts))}")
    return flags


def _installs_gpuval(spec: JobSpec, options: SlurmOptions) -> bool:
    """gpuval's own workloads in a container: the warm-up step installs gpuval into the named container (pyxis keeps
    it for the job's later steps); nccl-tests' binaries come with the user's image."""
    return bool(spec.image) and options.warmup and spec.command[0] == "gpuval"


def _main_step(spec: JobSpec, options: SlurmOptions) -> str:
    """The srun line that runs the workload (shell text: every user value quoted)."""
    argv = process_argv(spec, options.python)
    container = _container_flags(spec, options, image=not options.warmup)
    if spec.launcher is Launcher.TORCHRUN:
        # One torchrun per node, with the node's CPUs (srun would otherwise start the allocation's task count,
        # one CPU each); the rendezvous host and port come from the script's variables.
        per_node = ["--ntasks=$SLURM_JOB_NUM_NODES", "--cpus-per-task=$SLURM_CPUS_ON_NODE"]
        rdzv = ["--nnodes=$SLURM_JOB_NUM_NODES", "--node-rank=$SLURM_NODEID", "--rdzv-backend=c10d",
                "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT", "--rdzv-id=$SLURM_JOB_ID"]
        run = torchrun_argv(spec, argv, [], options.python)
        at = run.index(f"--nproc-per-node={spec.procs_per_node}") + 1
        srun = ["srun", "--ntasks-per-node=1", *container]
        return " ".join([*(shlex.quote(a) for a in srun), *(f'"{a}"' for a in per_node),
                         *(shlex.quote(a) for a in run[:at]), *(f'"{r}"' for r in rdzv),
                         *(shlex.quote(a) for a in run[at:])])
    srun = ["srun"]
    if spec.launcher is Launcher.MPI:
        srun.append(f"--mpi={options.mpi}")
    srun += [f"--cpu-bind={options.cpu_bind or srun_cpu_bind(spec)}", *container]
    return shlex.join([*srun, *argv])


def render_script(spec: JobSpec, options: SlurmOptions, output: str) -> str:
    """The sbatch script of a job (pure)."""
    lines = ["#!/bin/bash", *_directives(spec, options, output),
             f"# gpuval job {spec.name}: {spec.workload or 'command'} ({spec.nodes} x {spec.procs_per_node} tasks)",
             "set -eo pipefail"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in spec.full_env().items()]
    # Rank 0's address for rendezvous: the first node's NodeAddr (its name may not resolve: cloud, test rigs).
    lines += [
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'export MASTER_ADDR="${MASTER_ADDR:-$(scontrol show node "$head_node" | '
        "sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')}\"",
    ]
    if options.master_port:
        lines.append(f"export MASTER_PORT={options.master_port}")
    elif spec.launcher is Launcher.TORCHRUN:
        lines.append('export MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"')
    if spec.image and options.warmup:
        lines.append("# import the container image once per node (and install gpuval into it where the image lacks it),"
                     " so the timed step pays for neither")
        source = SOURCE_IN_CONTAINER if options.source else ""
        work = install_gpuval_argv(source) if _installs_gpuval(spec, options) else ["true"]
        warm = ["srun", "--ntasks-per-node=1", *_container_flags(spec, options), *work]
        lines.append(shlex.join(warm))
    lines.append(_main_step(spec, options))
    return "\n".join(lines) + "\n"


def _run(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    if shutil.which(argv[0]) is None:
        raise MissingDependency(f"{argv[0]} not found: run on a Slurm login node (or install slurm-client)")
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{argv[0]} did not answer in {timeout:.0f} s") from None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _state_word(value: Any) -> str:
    """job_state: 'RUNNING' (22.05) or ['RUNNING', 'COMPLETING'] (23.02+); sacct adds ' by 0' to CANCELLED."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").split()[0].rstrip("+") if value else ""


def _number(value: Any) -> int | None:
    """An int, or Slurm 23+'s {"set": true, "number": N}, or {"return_code": ...} shapes."""
    if isinstance(value, dict):
        if "return_code" in value:
            return _number(value["return_code"])
        return int(value["number"]) if value.get("set", True) and "number" in value else None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _squeue_exit_code(value: Any) -> int | None:
    """22.05 gives the raw wait status (exit 1 -> 256); 23.02+ an object whose return_code is the code."""
    if isinstance(value, dict):
        return _number(value)
    raw = _number(value)
    if raw is None:
        return None
    signal_number = raw & 0x7F
    return 128 + signal_number if signal_number else raw >> 8


def _exit_code(text: str) -> int | None:
    """'2:0' (code:signal) -> 2."""
    head = text.split(":")[0]
    return int(head) if head.isdigit() else None


class SlurmEngine(Engine[SlurmOptions]):
    """Runs the job with sbatch."""

    name = "slurm"
    Options = SlurmOptions

    def _output(self, spec: JobSpec, workdir: str) -> str:
        return str(Path(workdir) / f"{spec.name}-%j.out")

    def render(self, spec: JobSpec) -> Rendered:
        """job.sbatch; the output goes to WORKDIR/NAME-%j.out."""
        options = self.options_for(spec)
        workdir = options.workdir or str(records.jobs_dir() / self.name / spec.name)
        return Rendered(self.name, {"job.sbatch": render_script(spec, options, self._output(spec, workdir))})

    def submit(self, spec: JobSpec) -> str:
        """sbatch --parsable job.sbatch, from the job's folder."""
        options = self.options_for(spec)
        workdir = Path(options.workdir or records.jobs_dir() / self.name / spec.name).resolve()
        script = render_script(spec, options, self._output(spec, str(workdir)))
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "job.sbatch").write_text(script)
        proc = _run(["sbatch", "--parsable", f"--chdir={workdir}", str(workdir / "job.sbatch")])
        if proc.returncode != 0:
            raise EngineError(f"sbatch refused the job: {_first_line(proc.stderr) or proc.returncode}")
        job_id = _first_line(proc.stdout).split(";")[0]  # "ID" or "ID;cluster"
        if not job_id.isdigit():
            raise EngineError(f"sbatch printed no job id: {proc.stdout.strip()!r}")
        records.save(records.JobRecord(
            engine=self.name, job_id=job_id, spec=spec, workdir=str(workdir),
            output=self._output(spec, str(workdir)).replace("%j", job_id),
            run_id=spec.env.get("GPUVAL_RUN_ID", ""),
        ))
        return job_id

    def status(self, job_id: str) -> JobStatus:
        """squeue --json, else sacct, else the job-completion file."""
        for reader in (self._from_squeue, self._from_sacct, self._from_jobcomp):
            found = reader(job_id)
            if found is not None:
                return found
        return unknown(self.name, job_id, "not in squeue, sacct or the job-completion record")

    def _status(self, job_id: str, word: str, source: str, code: int | None = None) -> JobStatus:
        return JobStatus(job_id=job_id, engine=self.name, state=_STATES.get(word, JobState.UNKNOWN),
                         native_state=word, exit_code=code, source=source)

    def _from_squeue(self, job_id: str) -> JobStatus | None:
        proc = _run(["squeue", "--json", "--jobs", job_id])
        if proc.returncode != 0:
            return None  # squeue exits 1 for a job id it has already forgotten
        try:
            jobs = json.loads(proc.stdout).get("jobs", [])
        except json.JSONDecodeError:
            return None
        for job in jobs:
            if str(_number(job.get("job_id"))) == job_id:
                return self._status(job_id, _state_word(job.get("job_state")), "squeue",
                                    _squeue_exit_code(job.get("exit_code")))
        return None

    def _from_sacct(self, job_id: str) -> JobStatus | None:
        # -P with named fields (-o): the order is ours, so no field moves between Slurm versions.
        proc = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode"])
        if proc.returncode != 0:
            return None  # accounting storage disabled on this cluster
        for line in proc.stdout.splitlines():
            fields = line.split("|")
            if len(fields) == 3 and fields[0] == job_id:
                return self._status(job_id, _state_word(fields[1]), "sacct", _exit_code(fields[2]))
        return None

    def _jobcomp_path(self) -> Path | None:
        proc = _run(["scontrol", "show", "config"])
        settings = dict(_key_values(line) for line in proc.stdout.splitlines() if "=" in line)
        if "filetxt" not in settings.get("JobCompType", ""):
            return None
        location = settings.get("JobCompLoc", "")
        return Path(location) if location.startswith("/") else None

    def _from_jobcomp(self, job_id: str) -> JobStatus | None:
        path = self._jobcomp_path()
        if path is None or not path.exists():
            return None
        found = None
        for line in path.read_text(errors="replace").splitlines():
            fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            if fields.get("JobId") == job_id:
                found = fields  # a requeued job has several lines: the last one counts
        if found is None:
            return None
        return self._status(job_id, _state_word(found.get("JobState")), "jobcomp",
                            _exit_code(found.get("ExitCode", "")))

    def _output_file(self, job_id: str) -> Path:
        record = records.load(self.name, job_id)
        if record is not None and record.output:
            return Path(record.output)
        proc = _run(["scontrol", "show", "job", job_id])
        for token in proc.stdout.split():
            if token.startswith("StdOut="):
                return Path(token.split("=", 1)[1])
        raise UsageError(f"Slurm job {job_id}: gpuval did not submit it and Slurm no longer knows its output file")

    def logs(self, job_id: str) -> str:
        """The job's output file (stdout and stderr of every step)."""
        path = self._output_file(job_id)
        return path.read_text(errors="replace") if path.exists() else ""

    def cancel(self, job_id: str) -> None:
        """scancel."""
        proc = _run(["scancel", job_id])
        if proc.returncode != 0:
            raise EngineError(f"scancel {job_id}: {_first_line(proc.stderr) or proc.returncode}")
        records.mark_cancelled(self.name, job_id)


def _key_values(line: str) -> tuple[str, str]:
    key, _, value = line.partition("=")
    return key.strip(), value.strip()
