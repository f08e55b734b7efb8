"""This host's name, as nccl-tests prints it, and what a process's environment says of where it runs: the
scheduler's name of its node (`scheduler_node`) and the job it is in (`job_of`). (Describing this machine for a
Result record is gpuval.workloads.base.this_host's: the node layer builds no records; THE name of this node for
verdicts and drains is gpuval.engines.nodes.this_node, built on these.) No import here but the standard library:
gpuval.hooks, which a training script imports, reads its job through this module."""

from __future__ import annotations

import socket
from typing import Mapping

# THE variable a job or pod carries its node's scheduler name in (a pod's host name is the pod's, not the node's):
# every gpuval pod gets it from the downward API (spec.nodeName); slurmd sets SLURMD_NODENAME in every task.
NODE_NAME_VARIABLE = "GPUVAL_NODE_NAME"
NODE_NAME_KEYS = (NODE_NAME_VARIABLE, "SLURMD_NODENAME")
# What names a process's job, the scheduler's own first: Slurm's job, Azure ML's run, torchrun's rendezvous id (its
# --rdzv-id; "none" without one, which names no job), then the one a user sets for a job no scheduler names.
JOB_KEYS = ("SLURM_JOB_ID", "AZUREML_RUN_ID", "TORCHELASTIC_RUN_ID", "GPUVAL_JOB_ID")


def hostname() -> str:
    """Short host name, as nccl-tests prints it."""
    return socket.gethostname().split(".")[0]


def scheduler_node(env: Mapping[str, str]) -> str | None:
    """The scheduler's name of the node a process runs on, as its environment (`env`: its own, or another's read
    from /proc/PID/environ) says: GPUVAL_NODE_NAME, else SLURMD_NODENAME; None where it says neither."""
    return next((env[key] for key in NODE_NAME_KEYS if env.get(key)), None)


def job_of(env: Mapping[str, str]) -> str:
    """THE rule for the job a process is in, as its environment (`env`: its own, or another's read from
    /proc/PID/environ) says: the first of JOB_KEYS set to a value other than "none"; '' where none is. The step
    timer's rank identity, the Flight Recorder's stem, the probe's check of a rank's job and a Result's
    `where.job_id` all read it here."""
    return next((env[key] for key in JOB_KEYS if env.get(key, "none") not in ("", "none")), "")
