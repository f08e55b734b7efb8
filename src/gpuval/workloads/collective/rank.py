"""What a bench rank is before it measures: its request (BenchRequest, which travels to spawned ranks as JSON) and
how it joins the job (join_bench), shared by the unsplit run (run.py) and the per-split run (split.py).

Joining, in order: the rank's device; its place beside that GPU (its local CPUs and NUMA memory, as a launcher
binding nccl-tests' ranks does); the path that will call the collectives (direct.choose_path); then the job's
process group, on gloo where NCCL is called through nccl4py, so that the communicator nccl4py opens is the rank's
only NCCL one, as in nccl-tests (torch.distributed then carries only the barriers and -a's combine, on the host).
On the torch.distributed path the group is the device's backend (nccl or gloo): that group is what it measures.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from gpuval.collectives.direct import CommPath, choose_path
from gpuval.collectives.driver import BenchConfig
from gpuval.node.dist_env import DistEnv
from gpuval.workloads.ranks import join_group, place_near_gpu, rank_device


class BenchRequest(BaseModel):
    """Everything one rank needs; travels to spawned ranks as a JSON file."""

    config: BenchConfig
    run_id: str
    json_path: str | None = None
    results_path: str | None = None
    report_path: str | None = None  # where rank 0 leaves the -J document for the launching process
    progress_path: str | None = None  # where rank 0 keeps the rows so far, for the launcher if rank 0 dies
    sku: str | None = None
    quiet: bool = False
    env: dict[str, str] = Field(default_factory=dict)  # extra variables for the spawned ranks (NCCL_* settings)
    record: bool = True  # save a Result record; False for measurements another record reports (health checks)
    argv: list[str] = Field(default_factory=lambda: list(sys.argv))  # the user's command, for the -J document


@dataclass(frozen=True)
class Joined:
    """A rank that joined: its device, the backend of its process group, the path, and how it was placed (None on
    a CPU rank)."""

    device: Any
    group: str
    path: CommPath
    placed: str | None


def group_backend(path: CommPath, backend: str) -> str:
    """The process group's backend: gloo where NCCL is called through nccl4py (its communicator must be the only
    NCCL one), else the device's backend."""
    return "gloo" if path.bindings is not None else backend


def join_bench(torch: Any, env: DistEnv, cfg: BenchConfig) -> Joined:
    """Device, placement, path, then the job's process group (module docstring)."""
    device, backend = rank_device(torch, cfg.backend, env.local_rank)
    placed = place_near_gpu(torch, device)
    path = choose_path(cfg.via, device.type == "cuda")
    group = group_backend(path, backend)
    join_group(torch, env, device, group, cfg.timeout_s)
    return Joined(device, group, path, placed)
