"""The job description every engine renders: one `JobSpec`, whatever runs it.

A workload builds a JobSpec (what to run, on how many nodes and processes, with which network settings);
an engine turns it into its own shape (a shell command, an sbatch script, Kubernetes manifests, an Azure ML
command job). Engine-only settings travel in `extras`, namespaced by engine name:
`extras={"slurm": {"partition": "hpc"}, "kubernetes": {"namespace": "gpu"}}`; each engine documents the keys it
reads in its own options model.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuval.engines.presets import NetworkPreset

# Names go into job names, file names, Kubernetes object names (RFC 1123) and Azure ML job names:
# the intersection of what they all accept.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$")


class Launcher(str, Enum):
    """How the processes of one job are started: an MPI launcher, torchrun, or the engine alone."""

    MPI = "mpi"
    TORCHRUN = "torchrun"
    NONE = "none"


class Mount(BaseModel):
    """A host path made visible inside the job's container (Slurm pyxis, Kubernetes hostPath)."""

    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    read_only: bool = False

    @classmethod
    def parse(cls, text: str) -> "Mount":
        """`SRC:DST[:ro]`, the notation of docker -v and pyxis --container-mounts."""
        parts = text.split(":")
        if len(parts) not in (2, 3) or not all(parts[:2]) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ValueError(f"mount {text!r} is not SRC:DST or SRC:DST:ro")
        return cls(source=parts[0], target=parts[1], read_only=len(parts) == 3 and parts[2] == "ro")

    def __str__(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


class JobSpec(BaseModel):
    """What to run and on how much hardware; engines render it, never change it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Job name: lower-case letters, digits and dashes (a Kubernetes name).")
    command: list[str] = Field(min_length=1, description="argv of one process; never a shell string.")
    image: str | None = Field(None, description="Container image; None runs on the host (Slurm, local).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of every process.")
    nodes: int = Field(1, ge=1)
    procs_per_node: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_proc: int | None = Field(None, ge=1, description="CPU cores per process (Slurm --cpus-per-task).")
    launcher: Launcher = Launcher.NONE
    network: NetworkPreset | None = Field(None, description="NCCL/UCX settings of the SKU, merged under `env`.")
    shm_size: str | None = Field(None, description="Size of /dev/shm inside the container, e.g. 64g.")
    mounts: list[Mount] = Field(default_factory=list)
    time_limit_min: int | None = Field(None, ge=1, description="Wall-clock limit in minutes.")
    workload: str = Field("", description="The workload that built this spec; names the reader of its output.")
    extras: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per-engine options, by engine name.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"job name {value!r}: use 1-52 lower-case letters, digits and dashes, starting and ending with "
                "a letter or digit"
            )
        return value

    @property
    def world_size(self) -> int:
        """Processes in the whole job."""
        return self.nodes * self.procs_per_node

    def full_env(self) -> dict[str, str]:
        """The network preset's variables, then the job's own (which win), sorted for stable renders."""
        merged = dict(self.network.env if self.network else {})
        merged.update(self.env)
        return dict(sorted(merged.items()))

    def extra(self, engine: str) -> dict[str, Any]:
        """The options of one engine (empty when none were given)."""
        return dict(self.extras.get(engine, {}))


class JobState(str, Enum):
    """The one state set of every engine."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def done(self) -> bool:
        """The job will not change state any more."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class JobStatus(BaseModel):
    """One look at a job: the normalized state, the engine's own word for it, and where that came from."""

    job_id: str
    engine: str
    state: JobState
    native_state: str = ""
    exit_code: int | None = None
    source: str = ""
    detail: str = ""
