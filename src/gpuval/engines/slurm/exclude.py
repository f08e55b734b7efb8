"""Moving a running Slurm job off nodes (engines/exclude.py): requeue it, its node list then excluding them.

What Slurm 22.05 allows (tried on this project's daemons, as the job's owner and as root alike):
- `scontrol update JobId=J ExcNodeList=...` only while the job is pending ("Job is no longer pending execution"
  for a running one); so a running job is requeued held (`scontrol requeuehold J`: pending, "job requeued in held
  state"), its ExcNodeList set, then released (`scontrol release J`). Slurm starts it again, off those nodes, once
  its requeue delay has passed (`Reason=BeginTime`: about two minutes here). The job's earlier ExcNodeList is kept.
- Only a batch job is requeued ("Only batch jobs are accepted or processed" for one started by srun or salloc),
  and only one that allows it ("Requested operation is presently disabled" for one sent with --no-requeue): gpuval
  does not change the user's choice. For those, and for a job that asked for one of the nodes by name (ReqNodeList),
  nothing is sent: the exact exclude list and the command to send it again are given instead. So for a job whose
  partition would have fewer nodes in service outside the list than it runs on: Slurm takes that exclusion and
  leaves the requeued job pending for ever (Reason=BadConstraints), a running job turned into one that never runs.
- A job gpuval did not send is requeued the same way (Slurm allows it to its owner and its operators); only the
  script to send again differs: gpuval's record's job.sbatch, else squeue's command of the job, else the script
  Slurm keeps (`scontrol write batch_script`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from gpuval.engines.exclude import ExcludeStep, Exclusion
from gpuval.engines.records import JobRecord
from gpuval.engines.slurm.commands import first_line, output, run
from gpuval.engines.slurm.hostlist import compress, expand
from gpuval.engines.slurm.nodes import unavailable
from gpuval.engines.slurm.status import Placed, running_placement
from gpuval.errors import EngineError


def render_exclude(job_id: str, nodes: list[str], record: JobRecord | None) -> Exclusion:
    """The steps that move job `job_id` off `nodes` (squeue says what the job is), or the advice where Slurm or
    its user's choice does not allow it; sends nothing. `record`: gpuval's own record of the job, if any."""
    found = running_placement(job_id)
    if found is None:
        raise EngineError(f"Slurm job {job_id}: squeue does not know it (it ended, or the id is not this cluster's): "
                          "nothing to move")
    excluded = list(dict.fromkeys([*(expand(found.excluded) if found.excluded else []), *nodes]))
    listed = compress(excluded)
    done = Exclusion(job_id, "slurm", list(nodes), excluded)
    done.advice = _refused(job_id, found, nodes, listed, record)
    if done.advice:
        return done
    update = ExcludeStep(f"scontrol update JobId={job_id} ExcNodeList={listed}",
                         ("scontrol", "update", f"JobId={job_id}", f"ExcNodeList={listed}"))
    if found.state == "PENDING":
        done.steps = [update]
        return done
    done.steps = [ExcludeStep(f"scontrol requeuehold {job_id} (the job ends on its nodes, pending and held)",
                              ("scontrol", "requeuehold", job_id)), update,
                  ExcludeStep(f"scontrol release {job_id} (Slurm starts it again off {listed} after its requeue "
                              "delay)", ("scontrol", "release", job_id))]
    return done


def _refused(job_id: str, found: Placed, nodes: list[str], listed: str, record: JobRecord | None) -> str:
    """Why nothing can be sent, and what the job's user does instead ('' when the job can be requeued)."""
    if found.state not in ("RUNNING", "PENDING"):
        return f"it is {found.state or 'in no state'}: nothing to move"
    asked = sorted(set(expand(found.required)) & set(nodes)) if found.required else []
    if asked:
        return (f"it asked for {', '.join(asked)} by name (--nodelist={found.required}), which Slurm keeps: send it "
                f"again with another --nodelist and --exclude={listed}")
    if not found.batch:
        return (f"Slurm requeues only batch jobs, and this one was started by srun or salloc: end it (scancel "
                f"{job_id}) and start it again with --exclude={listed} (srun --exclude={listed} ..., salloc "
                f"--exclude={listed} ...)")
    if not found.requeue:
        again = _again(job_id, found, record, listed)
        return (f"it was sent with --no-requeue (Requeue=0), which gpuval leaves as its user chose: cancel it "
                f"(scancel {job_id}) and send it again with --exclude={listed}: {again}")
    return _no_room(found, expand(listed), listed)


def _no_room(found: Placed, excluded: list[str], listed: str) -> str:
    """Why the job's partition has no room for it off `excluded` ('' where it has): fewer nodes in service outside
    them than the job runs on."""
    if not found.partition or not found.nodes:
        return ""
    listing = output(["sinfo", "-h", "-N", "-p", found.partition, "-o", "%N"]).split()
    outside = [n for n in dict.fromkeys(listing) if n not in excluded]
    left = [n for n in outside if n not in unavailable(outside)] if outside else []
    need = len(expand(found.nodes))
    if len(left) >= need:
        return ""
    return (f"it runs on {need} node(s) and its partition {found.partition} has {len(left)} in service outside "
            f"{listed}: requeued, it would wait for ever (Reason=BadConstraints); free or add nodes, or send it again "
            f"on fewer with --exclude={listed}")


def _again(job_id: str, found: Placed, record: JobRecord | None, listed: str) -> str:
    """The command that sends the job again off the nodes: gpuval's own script (every option in it), else the
    command squeue names (with the options it was first sent with), else Slurm's copy of its script."""
    if record is not None and record.workdir:
        return f"sbatch --exclude={listed} {shlex.quote(str(Path(record.workdir) / 'job.sbatch'))}"
    if found.command:
        return f"sbatch --exclude={listed} OPTIONS {found.command} (OPTIONS: those it was first sent with)"
    return (f"scontrol write batch_script {job_id} job.sh, then sbatch --exclude={listed} OPTIONS job.sh (OPTIONS: "
            "those it was first sent with)")


def send_exclude(exclusion: Exclusion) -> None:
    """Run the steps in order; the first Slurm refuses is the exclusion's problem, and a job requeued held is
    released whatever happened after (never left held: it would never run again)."""
    held = False
    try:
        for step in exclusion.steps:
            proc = run(list(step.argv))
            if proc.returncode != 0:
                why = first_line(proc.stderr) or first_line(proc.stdout) or f"exit {proc.returncode}"
                exclusion.problem = f"{shlex.join(step.argv)}: {why}"
                return
            held = held or step.argv[1] == "requeuehold"
            if step.argv[1] == "release":
                held = False
        exclusion.sent = True
    finally:
        if held:
            _release(exclusion)


def _release(exclusion: Exclusion) -> None:
    """Release a job requeued held when a later step failed: it runs again, on the nodes Slurm picks."""
    proc = run(["scontrol", "release", exclusion.job_id])
    after = ("released again: it runs again where Slurm puts it, the nodes not excluded" if proc.returncode == 0
             else f"and could not release it ({first_line(proc.stderr)}): it stays held; `scontrol release "
                  f"{exclusion.job_id}` lets it run")
    exclusion.problem = f"{exclusion.problem}; the job was requeued held, {after}"
