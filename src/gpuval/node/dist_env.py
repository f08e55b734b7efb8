"""Rank, world size and rendezvous of this process, read from whatever engine launched it.

torchrun, Kubeflow PyTorchJob and Azure ML's PyTorch distribution set RANK / WORLD_SIZE / MASTER_ADDR;
Open MPI (mpirun, Azure ML's MPI distribution, the MPI Operator) sets OMPI_COMM_WORLD_*; MPICH and
Intel MPI set PMI_*; `srun` sets SLURM_PROCID / SLURM_STEP_NUM_TASKS. See docs/engines.md.
"""

from __future__ import annotations

import os
import re
import socket
import zlib
from dataclasses import dataclass
from typing import Mapping

from gpuval.errors import UsageError

DEFAULT_PORT = 29500
_ENV_LAUNCHERS = ("torchrun", "kubeflow", "env")


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a distributed job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    launcher: str

    @property
    def init_method(self) -> str:
        """The torch.distributed rendezvous: `env://` where the launcher set torchrun's variables (it may also have
        set up a store, as torchrun --master_port 0 does), else rank 0's TCP address."""
        if self.launcher in _ENV_LAUNCHERS:
            return "env://"
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"


def _int(env: Mapping[str, str], *names: str, default: int | None = None) -> int:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise UsageError(f"environment variable {name}={value!r} is not an integer") from None
    if default is None:
        raise UsageError(f"environment variable {names[0]} is not set")
    return default


def _derived_port(env: Mapping[str, str], *keys: str) -> int:
    """MASTER_PORT, else a port every rank of the job derives alike from a job-wide id."""
    if env.get("MASTER_PORT"):
        return _int(env, "MASTER_PORT")
    for key in keys:
        if env.get(key):
            return 20000 + zlib.crc32(env[key].encode()) % 12000  # below Linux's ephemeral ports (32768-60999)
    return DEFAULT_PORT


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now: the rendezvous port of ranks gpuval starts on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: 'gpu-[03-05,9],login1' -> 'gpu-03'."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head:
        raise UsageError(f"cannot read Slurm node list {nodelist!r}")
    prefix, ranges = head.group(1), head.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _master_addr(env: Mapping[str, str], single_node: bool, launcher: str) -> str:
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    if env.get("AZ_BATCH_MASTER_NODE"):  # Azure ML MPI jobs: "10.0.0.4:6105"
        return env["AZ_BATCH_MASTER_NODE"].rsplit(":", 1)[0]
    if env.get("SLURM_JOB_NODELIST") and not single_node:
        return first_host(env["SLURM_JOB_NODELIST"])
    if single_node:
        return "127.0.0.1"
    raise UsageError(
        f"running under {launcher} across nodes but MASTER_ADDR is not set: export MASTER_ADDR=<rank 0's host>"
    )


def detect(env: Mapping[str, str] | None = None) -> DistEnv | None:
    """This process's place in a job, or None when no launcher started it."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "kubeflow" if "PET_NNODES" in env else "env"
        world = _int(env, "WORLD_SIZE")
        local_world = _int(env, "LOCAL_WORLD_SIZE", "PET_NPROC_PER_NODE", default=world)
        return DistEnv(
            rank=_int(env, "RANK"),
            world_size=world,
            local_rank=_int(env, "LOCAL_RANK", default=0),
            local_world_size=local_world,
            node_rank=_int(env, "GROUP_RANK", "NODE_RANK", default=_int(env, "RANK") // max(local_world, 1)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(env, "MASTER_PORT", default=DEFAULT_PORT),
            launcher=launcher,
        )
    for prefix, launcher, rank_keys in (
        ("OMPI_COMM_WORLD", "mpirun", ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")),
        ("PMI", "mpich", ("MPI_LOCALRANKID", "MPI_LOCALNRANKS")),
    ):
        rank_key = f"{prefix}_RANK"
        if rank_key in env:
            world = _int(env, f"{prefix}_SIZE")
            local_world = _int(env, rank_keys[1], default=world)
            rank = _int(env, rank_key)
            return DistEnv(
                rank=rank,
                world_size=world,
                local_rank=_int(env, rank_keys[0], default=rank),
                local_world_size=local_world,
                node_rank=rank // max(local_world, 1),
                master_addr=_master_addr(env, local_world == world, launcher),
                master_port=_derived_port(env, "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_ID", "SLURM_JOB_ID"),
                launcher=launcher,
            )
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:
        world = _int(env, "SLURM_STEP_NUM_TASKS")
        nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", default=1)
        return DistEnv(
            rank=_int(env, "SLURM_PROCID"),
            world_size=world,
            local_rank=_int(env, "SLURM_LOCALID", default=0),
            local_world_size=max(world // max(nodes, 1), 1),
            node_rank=_int(env, "SLURM_NODEID", default=0),
            master_addr=_master_addr(env, nodes == 1, "srun"),
            master_port=_derived_port(env, "SLURM_JOB_ID"),
            launcher="srun",
        )
    return None
