"""A job's numbered steps as Slurm tells of them, and the node each of srun's task labels may be read as.

`srun --label` puts the number of the task that printed a line in front of it, never its step's, and the job's
output file interleaves every step that writes to it. Slurm 22.05 keeps no record of which step wrote which line:
a label is a step's task only by that step's layout. So label k is read as a node only where every numbered step
that could have printed it and has a task k put that task on that same node:

- the steps Slurm tells of: the running ones (`squeue --steps`, each one's distribution from `scontrol show step`),
  and, where the cluster keeps accounting (slurmdbd), every step of the job, ended or running (`sacct`);
- step numbers are given in order from 0, so a number below the highest known that no command tells of is a step
  that ended and that Slurm no longer tells of (a cluster without accounting): its layout is unknown, and no label
  is read (`squeue --steps` shows J.1: J.0 ran before, and may have printed with another layout);
- a step of k tasks or fewer prints no label k, so it has no say on it: a one-task-per-node pre-flight beside a
  training of two tasks per node leaves the training's labels 2 and up readable, and label 1 (the pre-flight's
  second node, the training's first) unread.

gpuval's own probe steps (`jobs diagnose`, one task each) count as any step: Slurm does not tell who started a step,
and a job's own step may take their name (red team 6 R2). Their one task is label 0, so on a job of more than one
node label 0 is read as no node (the probe that finds rank 0 places it), and the other labels are unaffected.

What Slurm without accounting cannot tell: a step that started after the highest running one and ended before the
diagnosis. Its number is above every step any command still tells of, so no gap shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuval.engines.slurm.commands import run
from gpuval.engines.slurm.hostlist import expand
from gpuval.engines.slurm.labels import step_tasks
from gpuval.errors import GpuvalError

@dataclass(frozen=True)
class Step:
    """A numbered step of a job (`srun`'s; not batch, extern or interactive): its number, name, task count, host
    list and task distribution across nodes (Slurm's `Dist`/`Layout`, its first part: Block, Cyclic, Plane,
    Arbitrary; "" where not said)."""

    number: int
    name: str
    tasks: int
    nodes: str
    dist: str = ""

    def layout(self) -> tuple[str, ...] | None:
        """The node of each of its tasks (labels.step_tasks), None where Slurm's words do not tell it."""
        found = step_tasks(expand(self.nodes), self.tasks, self.dist)
        return tuple(found) if found is not None else None


def label_layout(steps: list[Step]) -> list[str | None]:
    """The node of each task label (None: not read), where the steps known number 0 to the highest with none
    missing and every one's layout is told: label k is a node where every step with a task k put it there; else
    none (the labels then name no node). A step's name has no say: a job may give its steps any name."""
    numbers = {s.number for s in steps}
    layouts = [s.layout() for s in steps]
    if not numbers or numbers != set(range(max(numbers) + 1)) or any(found is None for found in layouts):
        return []
    placed = [{found[k] for found in layouts if k < len(found)} for k in range(max(map(len, layouts)))]
    return [nodes.pop() if len(nodes) == 1 else None for nodes in placed]


def _step(job_id: str, step_id: str, tasks: str, nodes: str, name: str, dist: str) -> Step | None:
    """A numbered step of job `job_id` from Slurm's fields, None for another job's, a step without a number
    (batch, extern, interactive, a heterogeneous job's `S+C`) or one whose fields do not read."""
    job, _, number = step_id.partition(".")
    if job != job_id or not number.isdigit() or not tasks.isdigit() or not nodes:
        return None
    return Step(int(number), name, int(tasks), nodes, dist.split(":")[0])  # `Block,Pack` stays unknown


def running_steps(job_id: str) -> list[Step]:
    """The job's running numbered steps, as squeue lists them, each with its distribution (`step_distribution`).
    The name comes last: a step's name may hold the separator."""
    proc = run(["squeue", "--steps", f"--jobs={job_id}", "-h", "-o", "%i|%A|%N|%j"])
    found = []
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        step_id, tasks, nodes, name = (line.strip().split("|", 3) + ["", "", ""])[:4]
        step = _step(job_id, step_id, tasks, nodes, name, "")
        if step is not None:
            found.append(replace(step, dist=step_distribution(step_id)))
    return found


def step_distribution(step_id: str) -> str:
    """A step's distribution across nodes from `scontrol show step` ("" where not said). `Dist=` is read at its
    last place in the line: Slurm prints it after every field a user names (the step's name, its network), so a
    name that holds `Dist=` itself comes first."""
    proc = run(["scontrol", "show", "step", step_id, "-o"])
    at = proc.stdout.rfind(" Dist=") if proc.returncode == 0 else -1
    return proc.stdout[at + 6:].split(None, 1)[0].split(":")[0] if at >= 0 else ""


def accounted_steps(job_id: str) -> list[Step]:
    """Every numbered step of the job that Slurm's accounting holds, ended or running (`sacct`: its task count,
    nodes and `Layout`, the distribution it ran with); none where the cluster keeps no accounting or it does not
    answer (then only the running steps are known, and a gap in their numbers still shows a step it forgot)."""
    try:
        proc = run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobIDRaw,NTasks,NodeList,Layout,JobName"])
    except GpuvalError:
        return []
    return read_sacct_steps(job_id, proc.stdout) if proc.returncode == 0 else []


def read_sacct_steps(job_id: str, text: str) -> list[Step]:
    """The numbered steps of job `job_id` in `sacct -P -o JobIDRaw,NTasks,NodeList,Layout,JobName` output (the name
    last: it may hold the separator)."""
    found = []
    for line in text.splitlines():
        step_id, tasks, nodes, dist, name = (line.strip().split("|", 4) + ["", "", "", ""])[:5]
        step = _step(job_id, step_id, tasks, nodes, name, dist)
        if step is not None:
            found.append(step)
    return found


def step_layout(job_id: str) -> list[str | None]:
    """The node of each task label of a running job, from the layouts of its steps as Slurm tells of them
    (`label_layout`; a running step's word over accounting's); None for a label they disagree on, none where Slurm
    cannot tell."""
    steps = {s.number: s for s in accounted_steps(job_id)}
    steps.update((s.number, s) for s in running_steps(job_id))
    return label_layout(list(steps.values()))
