"""The Slurm engine's options (`--opt KEY=VALUE`, or JobSpec.extras["slurm"]), each checked where it is declared:
a name is a Slurm name, a host list a host list, a workdir holds no % (sbatch would read it as a pattern)."""

from __future__ import annotations

import re
import sys
from typing import Literal

from pydantic import Field, field_validator

from gpuval.engines.base import EngineOptions
from gpuval.engines.launch import gpuval_source

_SLURM_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_HOSTLIST = re.compile(r"^[A-Za-z0-9_.\[\],-]+$")


class SlurmOptions(EngineOptions):
    """Options of the Slurm engine (`--opt KEY=VALUE`, or JobSpec.extras["slurm"])."""

    partition: str | None = Field(None, description="sbatch --partition.")
    account: str | None = Field(None, description="sbatch --account.")
    exclusive: bool | None = Field(None, description="sbatch --exclusive: whole nodes, what a benchmark wants "
                                                     "[default: yes when the job uses GPUs].")
    workdir: str | None = Field(None, description="Folder for job.sbatch and the output file [default: a folder "
                                                  "per job under gpuval's jobs folder; must be on a shared file system].")
    python: str = Field(sys.executable, description="Interpreter that runs gpuval when the job has no image.")
    mpi: str | None = Field(None, description="srun --mpi plugin of the job's step [default: pmix for MPI programs "
                                              "(LAMMPS, nccl-tests), none for gpuval's own ranks, which need no PMI].")
    cpu_bind: str | None = Field(None, description="srun --cpu-bind [default: one mask per rank from the pinning "
                                                  "plan of the SKU's recorded layout, else cores].")
    container_name: str | None = Field(None, description="pyxis --container-name [default: the job name].")
    warmup: bool = Field(True, description="With an image: import the container once per node before the run "
                                            "(and install gpuval into it for gpuval's own workloads).")
    source: str | None = Field(default_factory=lambda: str(gpuval_source() or "") or None,
                               description="gpuval checkout on the shared file system, mounted into the container to "
                                           "install gpuval from [default: this gpuval's checkout; none: from PyPI].")
    master_port: int | None = Field(None, ge=1, le=65535,
                                    description="torchrun rendezvous port [default: derived from the job id].")
    container: bool = Field(False, description="Without --image, run in gpuval's own image (GPUVAL_IMAGE, else "
                                               "ghcr.io/gpuval/gpuval:VERSION) under pyxis [default: on the host].")
    nodelist: str | None = Field(None, description="sbatch --nodelist: run on exactly these nodes (a Slurm host "
                                                   "list, e.g. gpu-[01-04]); what `gpuval fleet` pins each test with.")
    exclude: str | None = Field(None, description="sbatch --exclude: never run on these nodes (a Slurm host list, "
                                                  "e.g. the one `gpuval fleet check` prints).")
    reservation: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
                                    description="sbatch --reservation: run in this reservation (what `gpuval fleet "
                                                "retest` runs its re-tests in).")
    kill_on_bad_exit: bool = Field(False, description="srun --kill-on-bad-exit: end the whole step as soon as one "
                                                      "task fails, instead of letting its peers wait for it.")
    imex_channels: Literal["job", "segment"] = Field(
        "job", description="IMEX channels of a multi-node NVLink job (GB200/GB300 NVL72) where the cluster runs "
                           "SwitchType=switch/nvidia_imex (Slurm 24.05+): job, one for the whole job (what the plugin "
                           "gives every job, as a site's IMEX prolog does), or segment, one per --segment (sbatch "
                           "--network=unique-channel-per-segment, Slurm 25.11+ with topology/block).")
    segment: int | None = Field(None, ge=1, description="sbatch --segment (topology/block): the job's nodes in groups "
                                                        "of this many, each inside one block, e.g. one NVLink domain "
                                                        "(18 trays of a GB200 NVL72 rack; 16 leaves room for two "
                                                        "trays down).")

    @field_validator("workdir")
    @classmethod
    def _no_pattern(cls, value: str | None) -> str | None:
        if value is not None and "%" in value:
            raise ValueError(f"{value!r}: no % (sbatch reads it in --output as a file name pattern)")
        return value

    @field_validator("nodelist", "exclude")
    @classmethod
    def _hostlist(cls, value: str | None) -> str | None:
        if value is not None and not _HOSTLIST.match(value):
            raise ValueError(f"{value!r} is not a Slurm host list (names, commas, [ranges])")
        return value

    @field_validator("partition", "account", "container_name")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        if value is not None and not _SLURM_NAME.match(value):
            raise ValueError(f"{value!r} is not a Slurm name (letters, digits, _ . + -)")
        return value
