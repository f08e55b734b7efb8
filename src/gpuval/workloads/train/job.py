"""The `train` workload: document 004's data-parallel training job on any engine: an Azure ML command job with
PyTorch distribution (on an AmlCompute cluster or an attached AKS compute), a Kubeflow PyTorchJob, torchrun under
srun on Slurm, torchrun here. Each rank runs `gpuval train` and reads its rank and rendezvous from the engine's
variables; rank 0 prints the Result record. Its arguments: `[--steps N] [--batch-size N] [--image-size N]
[--backend auto|nccl|gloo]`.
"""

from __future__ import annotations

from pydantic import ValidationError

from gpuval.engines.spec import JobSpec, Launcher
from gpuval.errors import UsageError, validation_error
from gpuval.results import Result
from gpuval.workloads.base import (
    Output, ResultContext, Workload, WorkloadArgs, WorkloadRequest, base_spec, printed_results,
)
from gpuval.workloads.train.run import train_job_command
from gpuval.workloads.train.worker import TrainConfig

BACKENDS = ("auto", "nccl", "gloo")


def parse_args(args: list[str]) -> TrainConfig:
    """TrainConfig from the workload's arguments (defaults: TrainConfig's)."""
    defaults = TrainConfig()
    parser = WorkloadArgs("train")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--image-size", type=int, default=defaults.image_size)
    parser.add_argument("--backend", choices=BACKENDS, default=defaults.backend)
    parser.add_argument("--step-report", type=int, default=defaults.step_report)
    parsed = parser.parse_args(args)
    try:
        return TrainConfig(**vars(parsed))
    except ValidationError as exc:
        raise validation_error(exc, "train workload arguments", as_flag=True) from None


def build(req: WorkloadRequest) -> JobSpec:
    """One rank per GPU (at least one per node) under torchrun: srun + torchrun, PyTorchJob, Azure ML PyTorch."""
    if req.use:
        raise UsageError("the train workload has no --use variants")
    cfg = parse_args(req.args)
    return base_spec(req, train_job_command(cfg), Launcher.TORCHRUN, procs_per_node=max(req.gpus_per_node, 1))


def read(output: Output, ctx: ResultContext) -> list[Result]:
    """The Result record rank 0 printed (samples/s, step time p50/p95, loss first and last, world size)."""
    return printed_results(output, ctx, kind="train")


WORKLOAD = Workload(name="train", help="Data-parallel training (small ResNet, synthetic images, torch DDP) on every "
                    "rank.", build=build, read=read)
