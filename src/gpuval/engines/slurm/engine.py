"""Slurm: an sbatch script (pyxis/enroot containers when the job has an image), `sbatch --parsable`, and the
job's state from `squeue --json`, else `sacct`, else the job-completion record (JobCompType=jobcomp/filetxt).

Everything a user typed reaches the script through shlex.quote, or is refused by a name check (partition,
account); no value holds a control character (engines/inert.py), so no `#SBATCH` line can end early and no value
can run shell code. The workdir is resolved in render: the dry run shows the path sbatch gets. Without --image
the job runs on the host, unless `--opt container=true` asks for gpuval's own image. Slurm's commands run through
commands.py, the status readers are in status.py. Tested against real Slurm daemons (tests/helpers/slurm.py).
"""

from __future__ import annotations

import os
import pwd
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, TextIO

from gpuval.engines import records
from gpuval.engines.base import Engine, Facts, JobUnreachable, Rendered, unknown
from gpuval.engines.exclude import Exclusion
from gpuval.engines.binding import srun_cpu_bind
from gpuval.engines.launch import (
    SOURCE_IN_CONTAINER, default_image, install_gpuval_argv, process_argv, torchrun_argv,
)
from gpuval.engines.output import file_lines, follow_file
from gpuval.engines.probe import Placement, ProbeCall, ProbeOutput, answered
from gpuval.engines.slurm.commands import first_line, output, run
from gpuval.engines.slurm.exclude import render_exclude, send_exclude
from gpuval.engines.slurm.hostlist import expand
from gpuval.engines.slurm.labels import LABEL_ENV, NodeLines, labelled, task_nodes
from gpuval.engines.slurm.nodes import SlurmNodes
from gpuval.engines.slurm.options import SlurmOptions
from gpuval.engines.slurm.output_file import OutputFile, job_output
from gpuval.engines.slurm.site import SlurmSite
from gpuval.engines.slurm.status import cluster_name, job_nodes, read_statuses, running_placement, submit_time
from gpuval.engines.slurm.steps import step_layout
from gpuval.engines.spec import JobSpec, JobStatus, Launcher
from gpuval.errors import EngineError, GpuvalError, UsageError
from gpuval.node.unshadowed import isolated_module_argv

STEP_REFUSED = "Access/permission denied"  # srun's words when slurmctld refuses the caller a step in the job
PROBE_STEP = "gpuval-probe"  # the name of `jobs diagnose`'s steps, for people (squeue); steps.py reads no name


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
    if options.nodelist:
        lines.append(f"--nodelist={options.nodelist}")
    if options.exclude:
        lines.append(f"--exclude={options.exclude}")
    if options.reservation:
        lines.append(f"--reservation={options.reservation}")
    if options.segment:
        lines.append(f"--segment={options.segment}")
    if options.imex_channels == "segment":
        lines.append("--network=unique-channel-per-segment")
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


def _mpi_flag(spec: JobSpec, options: SlurmOptions) -> str:
    """srun's MPI plugin, always named (else the cluster's MpiDefault applies, and a plugin that cannot load there
    fails a job that needs none): PMIx for MPI programs, none for gpuval's ranks (they read the launcher's
    environment), `--opt mpi=` over both."""
    return f"--mpi={options.mpi or ('pmix' if spec.pmi else 'none')}"


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
        launch = torchrun_argv(spec, argv, [], options.python)
        at = launch.index(f"--nproc-per-node={spec.procs_per_node}") + 1
        srun = ["srun", "--ntasks-per-node=1", _mpi_flag(spec, options),
                *(["--kill-on-bad-exit=1"] if options.kill_on_bad_exit else []), *container]
        return " ".join([*(shlex.quote(a) for a in srun), *(f'"{a}"' for a in per_node),
                         *(shlex.quote(a) for a in launch[:at]), *(f'"{r}"' for r in rdzv),
                         *(shlex.quote(a) for a in launch[at:])])
    srun = ["srun", *(["--kill-on-bad-exit=1"] if options.kill_on_bad_exit else []), _mpi_flag(spec, options)]
    srun += [f"--cpu-bind={options.cpu_bind or srun_cpu_bind(spec)}", *container]
    return shlex.join([*srun, *argv])


def render_script(spec: JobSpec, options: SlurmOptions, output: str) -> str:
    """The sbatch script of a job (pure)."""
    lines = ["#!/bin/bash", *_directives(spec, options, output),
             f"# gpuval job {spec.name}: {spec.workload or 'command'} ({spec.nodes} x {spec.procs_per_node} tasks)"]
    if spec.shm_size:
        lines.append(f"# --shm-size {spec.shm_size} is not applied: pyxis containers share the node's /dev/shm")
    lines.append("set -eo pipefail")
    env = {**spec.full_env(), **(LABEL_ENV if spec.attributed else {})}
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())]
    # Rank 0's address for rendezvous: the first node's NodeAddr (its name may not resolve: cloud, test rigs).
    lines += [
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'export MASTER_ADDR="${MASTER_ADDR:-$(scontrol show node "$head_node" | '
        "sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')}\"",
    ]
    if options.master_port:
        lines.append(f"export MASTER_PORT={options.master_port}")
    elif spec.launcher is Launcher.TORCHRUN:  # a port per job, under Linux's ephemeral range (32768-60999)
        lines.append('export MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 12000))}"')
    if spec.image and options.warmup:
        lines.append("# import the container image once per node (and install gpuval into it where the image lacks it),"
                     " so the timed step pays for neither")
        source = SOURCE_IN_CONTAINER if options.source else ""
        work = install_gpuval_argv(source) if _installs_gpuval(spec, options) else ["true"]
        warm = ["srun", "--ntasks-per-node=1", "--mpi=none", *_container_flags(spec, options), *work]
        lines.append(shlex.join(warm))
    lines.append(_main_step(spec, options))
    return "\n".join(lines) + "\n"


class SlurmEngine(Engine[SlurmOptions]):
    """Runs the job with sbatch."""

    name = "slurm"
    Options = SlurmOptions
    # slurmd sets SLURMD_NODENAME for HealthCheckProgram, prolog, epilog and every task; a job step has SLURM_JOB_ID
    NODE_VARIABLES = ("SLURMD_NODENAME", "SLURM_JOB_ID")
    NODE_COMMAND = "scontrol"

    def site(self, sku: str | None = None, switch_label: str | None = None,
             rack_label: str | None = None) -> SlurmSite:
        return SlurmSite(self, switch_label, rack_label)

    def node_client(self) -> SlurmNodes:
        return SlurmNodes()

    def render(self, spec: JobSpec, facts: Facts | None = None) -> Rendered:
        """job.sbatch, with the workdir resolved to an absolute path; the output goes to WORKDIR/NAME-%j.out."""
        options = self.options_for(spec, facts)
        if options.container and not spec.image:
            spec = spec.model_copy(update={"image": default_image()})
        # resolved (links followed) here: the dry run shows the path sbatch gets, which _send checks
        named = os.path.expanduser(options.workdir or records.jobs_dir() / self.name / spec.name)
        workdir = str(records.resolved(named))
        output = str(Path(workdir) / f"{spec.name}-%j.out")
        return Rendered(self.name, {"job.sbatch": render_script(spec, options, output)}, spec, job_name=spec.name,
                        workdir=workdir, output=output)

    def _send(self, rendered: Rendered) -> str:
        """`sbatch --parsable` from the job's folder, the script on its standard input: job.sbatch is written
        there too (for people, and `sbatch --exclude` again), but sbatch never reads a path another process could
        have swapped. The folder is checked first (records.private_dir: only its owner or root may write it, or
        Slurm would write the job's output, as this user, through a link another user planted there)."""
        workdir = records.private_dir(Path(str(rendered.workdir)))
        if str(workdir) != rendered.workdir:  # render resolved it: a link on the way changed since
            raise UsageError(f"{rendered.workdir}: now leads to {workdir}: not sent")
        rendered.write(workdir)
        printed = output(["sbatch", "--parsable", f"--chdir={workdir}"], "sbatch refused the job",
                         stdin=rendered.files["job.sbatch"])
        job_id = first_line(printed).split(";")[0]  # "ID" or "ID;cluster"
        if not job_id.isdigit():
            raise EngineError(f"sbatch printed no job id: {printed.strip()!r}")
        return job_id

    def _output_of(self, rendered: Rendered, job_id: str) -> str | None:
        return str(rendered.output).replace("%j", job_id)

    def cluster_name(self) -> str:
        """This cluster's ClusterName (`scontrol show config`, read once per process)."""
        return cluster_name()

    def submitted_at(self, job_id: str) -> datetime | None:
        """The job's submit time: squeue's, else sacct's (None: Slurm no longer knows it)."""
        return submit_time(job_id)

    def status(self, job_id: str) -> JobStatus:
        """squeue --json, else sacct, else the job-completion file. A job none of them knows and gpuval did not
        submit is a one-line error (a typo, or another cluster's id), not an `unknown` that looks like a state."""
        found = read_statuses([job_id]).get(job_id)
        if found is not None:
            return found
        if self.record(job_id) is None:
            raise UsageError(f"Slurm job {job_id!r}: squeue, sacct and the job-completion record do not know it, "
                             "and gpuval did not submit it from here")
        return unknown(self.name, job_id, "not in squeue, sacct or the job-completion record")

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """All the jobs in one squeue call (then one sacct call, then one read of the job-completion file for the
        jobs squeue forgot); a job none of them knows is left out."""
        return read_statuses(list(job_ids))

    def _output_file(self, job_id: str) -> OutputFile:
        """The job's output file: gpuval's own record's (its owner unchecked: gpuval wrote the path), else the one
        Slurm's JSON names for a job gpuval did not submit (output_file.py), to be read only as its user's file."""
        record = self.record(job_id)
        if record is not None and record.output:
            return OutputFile(Path(record.output), None)
        found = job_output(job_id)
        if found is None:
            raise UsageError(f"Slurm job {job_id}: gpuval did not submit it and Slurm no longer knows its output "
                             "file")
        return found

    def output_place(self, job_id: str) -> str:
        """The job's output file (stdout and stderr of every step)."""
        return str(self._output_file(job_id).path)

    def log_lines(self, job_id: str) -> Iterator[str]:
        """The job's output file (stdout and stderr of every step), line by line (engines/output.file_lines: a
        regular file, its user's, each line bounded)."""
        found = self._output_file(job_id)
        return file_lines(found.path, found.owner)

    def node_lines(self, job_id: str) -> NodeLines:
        """The output file's lines with the node of each (labels.py): srun's task label, and the task's node in the
        job's host list: the one it was pinned to (its `nodelist` option, from the job record), else the nodes
        Slurm allocated it (`status.job_nodes`: scontrol, sacct or the job-completion file; never the job's own
        output). A job sent without the labels (SLURM_LABELIO: `attributed`, or the fleet's job_env), or one whose
        nodes Slurm no longer knows, names no node. A job not sent from here has its labelled lines (`srun
        --label`) placed only by the one layout of every step that could have printed them (steps.py); where
        Slurm cannot tell it, each line names no node (a probe that found the rank places it)."""
        lines = self.log_lines(job_id)
        record = self.record(job_id)
        if record is None:
            return labelled(lines, step_layout(job_id))
        spec, options = record.spec, self.options_for(record.spec)
        if not (spec.attributed or all(spec.env.get(k) == v for k, v in LABEL_ENV.items())):
            return ((None, line) for line in lines)
        hosts = options.nodelist or job_nodes(job_id)
        if not hosts:
            return ((None, line) for line in lines)
        per_node = 1 if spec.launcher is Launcher.TORCHRUN else spec.procs_per_node  # one torchrun per node
        return labelled(lines, task_nodes(expand(hosts), per_node))

    def placement(self, job_id: str) -> Placement:
        """The running job's nodes (squeue's host list, expanded in Slurm's order), start time and owner (the user
        whose ranks the probe reads)."""
        found = running_placement(job_id)
        if found is None:
            raise JobUnreachable(f"could not diagnose Slurm job {job_id}: squeue does not know it (it ended, or "
                                 "the id is not this cluster's)")
        if found.state != "RUNNING" or not found.nodes:
            raise JobUnreachable(f"could not diagnose Slurm job {job_id}: it is {found.state or 'in no state'}, "
                                 "not running")
        start = datetime.fromtimestamp(found.start, timezone.utc) if found.start else None
        return Placement(expand(found.nodes), start, found.user_id)

    def rank_job_id(self, job_id: str) -> str:
        """The job's id: slurmd gives every task of it SLURM_JOB_ID."""
        return job_id

    def render_probe(self, job_id: str, nodes: list[str], args: list[str]) -> list[ProbeCall]:
        """One step per node inside the job's allocation, beside its running steps (--overlap), named PROBE_STEP
        (its output is the diagnosis's, never the job's file; steps.py counts it as any step all the same): one
        task on exactly that node, no PMI, run from / (--chdir: never the caller's folder, nor slurmstepd's /tmp
        where that folder is missing on the node) and isolated (node/unshadowed.py); in the job's pyxis container
        where it runs in one (the same named container, so the step sees the ranks' /tmp; its console script puts
        its own folder on sys.path, not the working folder)."""
        record = self.record(job_id)
        spec = record.spec if record is not None else None
        options = self.options_for(spec) if spec is not None else self.options
        container = [f"--container-name={options.container_name or spec.name}"] if spec and spec.image else []
        gpuval = ["gpuval"] if container else isolated_module_argv("gpuval", options.python)
        return [ProbeCall(node, ("srun", f"--jobid={job_id}", "--overlap", f"--nodelist={node}", "--nodes=1",
                                 "--ntasks=1", "--mpi=none", "--quiet", f"--job-name={PROBE_STEP}", "--chdir=/",
                                 *container, *gpuval, *args))
                for node in nodes]

    def _probe(self, call: ProbeCall, timeout_s: float) -> ProbeOutput:
        """srun, through the one Slurm command wrapper; a failure (the job ended, the node is gone) is that node's
        problem. Slurm refusing the caller any step in the job ends the diagnosis in one line (`refused`): no node
        of it could answer."""
        try:
            proc = run(list(call.argv), timeout_s)
        except GpuvalError as exc:
            return ProbeOutput(call.node, problem=str(exc))
        if proc.returncode != 0 and f"Unable to create step for job {probe_job(call)}: {STEP_REFUSED}" in proc.stderr:
            raise JobUnreachable(refused(probe_job(call)))
        return answered(call.node, proc.stdout, proc.stderr, proc.returncode, f"srun on {call.node}", timeout_s)

    def render_exclude(self, job_id: str, nodes: list[str]) -> Exclusion:
        """Requeue the job off `nodes` where Slurm and its user allow it, else say how (slurm/exclude.py)."""
        return render_exclude(job_id, nodes, self.record(job_id))

    def _exclude(self, exclusion: Exclusion) -> None:
        send_exclude(exclusion)

    def follow(self, job_id: str, out: TextIO, poll_s: float = 2.0) -> JobStatus:
        """The output file as the job writes it, until the job ends."""
        found = self._output_file(job_id)
        follow_file(found.path, lambda: self.status(job_id).state.done, out, poll_s, found.owner)
        return self.status(job_id)

    def cancel(self, job_id: str) -> None:
        """scancel."""
        output(["scancel", job_id], f"scancel {job_id}")
        self.mark_cancelled(job_id)


def probe_job(call: ProbeCall) -> str:
    """The job a probe call of render_probe's runs in (its `--jobid=`)."""
    return call.argv[1].partition("=")[2]


def refused(job_id: str) -> str:
    """Why no step of this caller's can run in job `job_id`, in one line: Slurm lets only the job's owner start one
    (on Slurm 22.05 root too is refused; `srun --uid` is refused as well)."""
    found = running_placement(job_id)
    owner = (found.user_name or f"uid {found.user_id}") if found is not None and found.user_id is not None else ""
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = f"uid {os.getuid()}"
    return (f"could not diagnose Slurm job {job_id}: Slurm refuses {me} a step in it (srun --overlap: "
            f"{STEP_REFUSED}); only the job's owner{f' ({owner})' if owner else ''} can diagnose it: run "
            "`gpuval jobs diagnose` as that user")
