"""The `lammps` workload: document 000's distributed LAMMPS job (an Azure ML command job with MpiDistribution
across 2 x 8 GPUs) on any engine. Every MPI rank runs `gpuval lammps`, which starts `lmp` as that rank; on GPU
nodes one rank per GPU with the GPU package (`--accel gpu`, the default when the job has GPUs) or KOKKOS
(`--accel kokkos`). Its arguments: `[--benchmark lj|chute] [--scale N|AxBxC] [--accel none|gpu|kokkos]`.
Rank 0 prints the run's Result record; `read` reads it back.
"""

from __future__ import annotations

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError
from gpuval.results import Result
from gpuval.workloads.base import (
    Output, ResultContext, Workload, WorkloadArgs, WorkloadRequest, base_spec, printed_results,
)
from gpuval.workloads.lammps.inputs import parse_scale
from gpuval.workloads.lammps.run import ACCELS, LammpsConfig, lammps_job_command


def parse_args(args: list[str], gpus_per_node: int) -> LammpsConfig:
    """LammpsConfig from the workload's arguments; the accelerator gets every GPU of the node."""
    parser = WorkloadArgs("lammps")
    parser.add_argument("--benchmark", "-b", default="lj")
    parser.add_argument("--scale", default="1")
    parser.add_argument("--accel", choices=ACCELS, default="gpu" if gpus_per_node else "none")
    parsed = parser.parse_args(args)
    if parsed.accel != "none" and not gpus_per_node:
        raise UsageError(f"lammps workload: --accel {parsed.accel} runs one MPI rank per GPU: give --gpus-per-node")
    return LammpsConfig(benchmark=parsed.benchmark, scale=parse_scale(parsed.scale), accel=parsed.accel,
                        gpus=max(gpus_per_node, 1))


def build(req: WorkloadRequest) -> JobSpec:
    """One MPI rank per GPU (at least one per node): srun --mpi, mpirun, Azure ML MPI, MPIJob."""
    if req.use:
        raise UsageError("the lammps workload has no --use variants (pick the input with -- --benchmark NAME)")
    cfg = parse_args(req.args, req.gpus_per_node)
    return base_spec(req, lammps_job_command(cfg), Launcher.MPI, procs_per_node=max(req.gpus_per_node, 1), pmi=True)


def read(output: Output, ctx: ResultContext) -> list[Result]:
    """The Result record rank 0 printed (timesteps/s, atom-step/s, loop time, tau/day or ns/day)."""
    return printed_results(output, ctx, kind="lammps")


WORKLOAD = Workload(name="lammps", help="LAMMPS benchmark (lj, chute) across MPI ranks; GPU package or KOKKOS on GPUs.",
                    build=build, read=read)
