"""Which node printed each line of a Slurm job's output, as Slurm says: srun's labels and the job's host list.

With SLURM_LABELIO=1 in the job's environment, srun puts the number of the task that printed a line in front of it
(`3: {...}`); a task that prints `5: ` itself still gets its own label first. Each line is split only at `\\n`
(engines/output.file_lines): a bare carriage return (`junk\\r0: {...}`) stays inside the line srun labelled, so no
task can start a line under another task's label. With SLURM_DISTRIBUTION=block, task k of a job pinned to a host
list runs on the (k // tasks per node)-th node of that list, in Slurm's order (the list compressed and expanded
again: `scontrol show hostnames` order). A line without a label (the batch script's own, srun's messages) has no
node.

Per-task output files (`srun --output %t`) would do the same without labels; they are not used: the job's one
output file is what `jobs logs`, `follow` and a failed job's explanation read, and the labelled lines keep working
over slurmstepd's 1 KiB messages with the piece protocol (results/pieces.py), which `gpuval submit health` needs
anyway.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator

from gpuval.engines.slurm.hostlist import compress, expand

# What the job's environment holds for its lines to be attributed (Site.job_env of the fleet check).
LABEL_ENV = {"SLURM_LABELIO": "1", "SLURM_DISTRIBUTION": "block"}
_LABEL = re.compile(r" *(\d{1,7}): ")

NodeLines = Iterator[tuple["str | None", str]]  # (the node that printed it, or None: unknown), the line


def task_nodes(nodes: Iterable[str], tasks_per_node: int) -> list[str]:
    """The node of each task of a job pinned to `nodes` (block layout, Slurm's host list order)."""
    per_node = max(tasks_per_node, 1)
    return [node for node in expand(compress(nodes)) for _ in range(per_node)]


def step_tasks(nodes: list[str], tasks: int, dist: str) -> list[str] | None:
    """The node of each task of a step of `tasks` tasks on `nodes` (its host list expanded), laid out by `dist`
    (Slurm's distribution): Block with as many tasks on every node, or Cyclic; None where the layout cannot be told
    from these alone (uneven blocks, Plane, Arbitrary, none said)."""
    if not nodes or tasks < 1:
        return None
    if dist == "Cyclic":
        return [nodes[task % len(nodes)] for task in range(tasks)]
    if dist == "Block" and tasks % len(nodes) == 0:
        return task_nodes(nodes, tasks // len(nodes))
    return None


def labelled(lines: Iterable[str], tasks: list[str] | list[str | None]) -> NodeLines:
    """Each line's task label (srun --label) turned into its node; no label, a task the job has not, or one whose
    node is not told (None in `tasks`): None."""
    for raw in lines:
        match = _LABEL.match(raw)
        if match is None:
            yield None, raw
            continue
        task = int(match.group(1))
        yield (tasks[task] if task < len(tasks) else None), raw[match.end():]
