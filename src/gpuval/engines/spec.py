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

from gpuval.collectives.sizes import parse_size
from gpuval.engines.inert import check_inert
from gpuval.engines.presets import NetworkPreset
from gpuval.errors import UsageError
from gpuval.results.dsn import hide_secrets

# Names go into job names, file names, Kubernetes object names (RFC 1123) and Azure ML job names:
# the intersection of what they all accept.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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

    @field_validator("source", "target")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        # pyxis joins mounts with commas: a comma in a path would add a mount of its own.
        if "," in value or ":" in value:
            raise ValueError(f"mount path {value!r}: no commas or colons")
        return check_inert(value, "mount path")

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
    pmi: bool = Field(False, description="The processes are MPI programs that take their rank from the launcher's "
                      "PMI (LAMMPS, nccl-tests): Slurm loads an MPI plugin for them (srun --mpi=pmix). gpuval's own "
                      "ranks read the launcher's environment and need none.")
    network: NetworkPreset | None = Field(None, description="NCCL/UCX settings of the SKU, merged under `env`.")
    shm_size: str | None = Field(None, description="Size of /dev/shm inside the container, e.g. 64g: a number with "
                                 "an optional K, M, G or T (powers of 1024, as every size in gpuval).")
    mounts: list[Mount] = Field(default_factory=list)
    time_limit_min: int | None = Field(None, ge=1, description="Wall-clock limit in minutes.")
    workload: str = Field("", description="The workload that built this spec; names the reader of its output.")
    attributed: bool = Field(False, description="Every output line is read with the node that printed it "
                             "(Engine.node_lines): the engine labels what its tasks print (Slurm: srun's --label, "
                             "block layout) where it needs to.")
    multi_node_nvlink: bool = Field(False, description="The job's nodes are trays of a multi-node NVLink domain "
                                    "(GB200/GB300 NVL72), as the SKU's baseline or the user's profile says: the "
                                    "Kubernetes engine gives such a job of more than one node a ComputeDomain "
                                    "(compute_domain auto).")
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

    @field_validator("command")
    @classmethod
    def _inert_command(cls, value: list[str]) -> list[str]:
        return [check_inert(word, "command word") for word in value]

    @field_validator("image")
    @classmethod
    def _inert_image(cls, value: str | None) -> str | None:
        return None if value is None else check_inert(value, "--image")

    @field_validator("env")
    @classmethod
    def _inert_env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"environment variable name {key!r}: use letters, digits and _")
            check_inert(item, f"environment variable {key}")
        return value

    @field_validator("shm_size")
    @classmethod
    def _valid_shm(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            size = parse_size(value)
        except UsageError as exc:
            raise ValueError(f"--shm-size: {exc}") from None
        if size <= 0:
            raise ValueError(f"--shm-size {value!r}: must be above 0")
        return value

    @property
    def shm_bytes(self) -> int | None:
        """--shm-size in bytes (validated when the spec was made), or None; engines render it in their own units."""
        return parse_size(self.shm_size) if self.shm_size else None

    @property
    def world_size(self) -> int:
        """Processes in the whole job."""
        return self.nodes * self.procs_per_node

    def full_env(self) -> dict[str, str]:
        """The network preset's variables, then the job's own (which win), sorted for stable renders."""
        merged = dict(self.network.env if self.network else {})
        merged.update(self.env)
        return dict(sorted(merged.items()))

    def with_secrets_hidden(self) -> "JobSpec":
        """This spec with every secret of its environment as *** (results.dsn.hide_secrets: the one rule): what a
        dry run renders for people to read."""
        return self.model_copy(update={"env": hide_secrets(self.env)})

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
    blocked: str = Field("", description="Why a queued job cannot start as the cluster stands, in the scheduler's "
                         "own word and what it means (a partition's node or time limit, a constraint no node has); "
                         "empty while it may start.")
    output: str = Field("", description="Where the job's whole output is (a file, or the command that shows it); "
                        "set on a failed job.")
    why: list[str] = Field(default_factory=list, description="The lines of a failed job's output that say why "
                           "(srun's and MPI's errors, error: lines, a traceback's exception line).")
