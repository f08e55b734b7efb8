"""This host's name, as nccl-tests prints it. (Describing this machine for a Result record is
gpuval.workloads.base.this_host's: the node layer builds no records.)"""

from __future__ import annotations

import socket


def hostname() -> str:
    """Short host name, as nccl-tests prints it."""
    return socket.gethostname().split(".")[0]
