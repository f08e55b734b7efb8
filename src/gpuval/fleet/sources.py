"""Which node printed each line of a job's output, as the engine (not the line) says.

A node's output is not trusted to name itself: a line is tied to the task or pod that printed it, and the reader
(lines.py) drops it when its own `node` or `test` field disagrees with that source.

- Slurm: every job of a check runs its tasks with srun's `--label` (SLURM_LABELIO=1 in the job's environment), so
  srun itself puts the task number in front of each line a task prints (`3: {...}`; a task that prints `5: ` itself
  still gets its own label first). Tasks are laid out block by block (SLURM_DISTRIBUTION=block): task k runs on the
  (k // tasks per node)-th node of the job, in Slurm's order of the pinned host list. A line without a label (the
  batch script's own output, srun's messages) has no source.
- Kubernetes: each pod's log is read on its own, and its lines belong to the node the scheduler put the pod on
  (`spec.nodeName`, from the API server, not from the pod).
- local: one machine; every line is this machine's.
"""

from __future__ import annotations

import io
import re
from typing import Any, Iterator

from gpuval.engines.output import ordered_map
from gpuval.fleet.job import RoundJob
from gpuval.engines.slurm.hostlist import compress, expand

Sourced = Iterator[tuple["str | None", str]]  # (the node that printed it, or None: unknown), the line
POD_READS = 16  # pod logs fetched at once
_LABEL = re.compile(r" *(\d{1,7}): ")


def task_nodes(job: RoundJob) -> list[str]:
    """Slurm: the node of each task of a job pinned to `job.nodes` (block layout, Slurm's host list order)."""
    per_node = max(job.spec.procs_per_node, 1)
    return [node for node in expand(compress(job.nodes)) for _ in range(per_node)]


def labelled(lines: Iterator[str], tasks: list[str]) -> Sourced:
    """Slurm: each line's task label (srun --label) turned into its node; no label, or a task the job has not: None."""
    for raw in lines:
        match = _LABEL.match(raw)
        if match is None:
            yield None, raw
            continue
        task = int(match.group(1))
        yield (tasks[task] if task < len(tasks) else None), raw[match.end():]


def from_one(node: str, lines: Iterator[str]) -> Sourced:
    """Every line from one node (a pod's log, the local machine)."""
    for raw in lines:
        yield node, raw


def pod_lines(engine: Any, job_id: str) -> Sourced:
    """Kubernetes: every pod of the job, its log's lines tied to the node the pod was scheduled on."""
    from kubernetes import client

    from gpuval.engines.kubernetes import LABEL
    from gpuval.engines.kubernetes.client import call

    namespace, _kind, name = job_id.split("/", 2)  # the engine's job id: NAMESPACE/KIND/NAME
    core = client.CoreV1Api(engine.client())
    pods = call("list pods", core.list_namespaced_pod, namespace, label_selector=f"{LABEL}={name}").items
    placed = [(p.metadata.name, p.spec.node_name if p.spec else None) for p in pods]

    def read(pod: tuple[str, str | None]) -> tuple[str | None, str]:
        return pod[1], call(f"logs of {pod[0]}", core.read_namespaced_pod_log, pod[0], namespace)

    for node, text in ordered_map(read, placed, POD_READS):
        for raw in io.StringIO(text):
            yield node, raw


def job_lines(site: Any, job_id: str, job: RoundJob) -> Sourced:
    """A job's output with the node of each line, as the site's scheduler says (see the module's docstring)."""
    engine = site.engine
    if site.scheduler == "slurm":
        return labelled(engine.log_lines(job_id), task_nodes(job))
    if site.scheduler == "kubernetes":
        return pod_lines(engine, job_id)
    return from_one(job.nodes[0], engine.log_lines(job_id))  # this machine, the one node it checks
