"""This host's name, as nccl-tests prints it, and the scheduler's name of the node a process runs on, as its
environment says. (Describing this machine for a Result record is gpuval.workloads.base.this_host's: the node layer
builds no records; THE name of this node for verdicts and drains is gpuval.engines.nodes.this_node, built on these.)"""

from __future__ import annotations

import socket
from typing import Mapping

# THE variable a job or pod carries its node's scheduler name in (a pod's host name is the pod's, not the node's):
# every gpuval pod gets it from the downward API (spec.nodeName); slurmd sets SLURMD_NODENAME in every task.
NODE_NAME_VARIABLE = "GPUVAL_NODE_NAME"
NODE_NAME_KEYS = (NODE_NAME_VARIABLE, "SLURMD_NODENAME")


def hostname() -> str:
    """Short host name, as nccl-tests prints it."""
    return socket.gethostname().split(".")[0]


def scheduler_node(env: Mapping[str, str]) -> str | None:
    """The scheduler's name of the node a process runs on, as its environment (`env`: its own, or another's read
    from /proc/PID/environ) says: GPUVAL_NODE_NAME, else SLURMD_NODENAME; None where it says neither."""
    return next((env[key] for key in NODE_NAME_KEYS if env.get(key)), None)
