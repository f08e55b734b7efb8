"""One rank of the training job, as started by torchrun, `accelerate launch`, srun, mpirun or an engine.

Rank and rendezvous come from gpuval.node.dist_env, so every launcher's variables work. Rank 0 writes a report
(JSON) for the process that launched the job and, inside an engine's job, the Result record.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import sys
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from gpuval.errors import EXIT_CANNOT_RUN, EngineError, GpuvalError
from gpuval.hooks import StepTimer
from gpuval.node.dist_env import DistEnv, detect, free_port
from gpuval.workloads.rank_starter import leave
from gpuval.workloads.train import flight
from gpuval.workloads.ranks import first_line, join, leave_group, rank_exit_code, require_torch


class TrainConfig(BaseModel):
    """The problem: small enough by default that 30 steps on 2 CPU ranks take seconds."""

    steps: int = Field(30, ge=2)
    warmup_steps: int = Field(3, ge=0)  # not timed: first steps pay for allocation and DDP bucket set-up
    batch_size: int = Field(32, ge=1)  # per rank
    image_size: int = Field(32, ge=8)
    classes: int = Field(10, ge=2)
    width: int = Field(16, ge=4)
    lr: float = Field(0.05, gt=0)
    seed: int = 1234
    backend: str = "auto"
    timeout_s: float = 300.0
    step_report: int = Field(10, ge=0)  # a step record (gpuval.hooks) every N steps on each rank's stderr; 0: none


class TrainReport(BaseModel):
    """What rank 0 measured."""

    world_size: int
    launcher: str
    backend: str
    device: str
    samples_per_s: float
    step_time_p50_s: float
    step_time_p95_s: float
    loss_first: float
    loss_last: float
    timed_steps: int
    pids: list[int]
    hosts: list[str]
    nccl_transport: str | None = None  # "P2P, NET/IB (network IB)"
    transport_status: str | None = None  # the one transport verdict on it (gpuval.baselines.transport)
    transport_reason: str = ""


class TrainRequest(BaseModel):
    """What every launched rank reads from its request file."""

    config: TrainConfig
    launcher: str
    report_path: str
    nprocs: int = 1


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def _nccl_transport(device: Any) -> tuple[str | None, str | None, str]:
    """On GPUs: (the paths and network NCCL reported in the ranks' debug files, set by the local launcher; the
    transport verdict on them, judged by the one verdict with this node's InfiniBand HCAs counted; its reason)."""
    from gpuval.baselines.transport import judge_transport, socket_causes
    from gpuval.collectives.nccl_debug import read_nccl_network
    from gpuval.node.machine import HardwareUnavailable
    from gpuval.node.sysfs import LinuxMachine

    path = os.environ.get("NCCL_DEBUG_FILE")
    if device.type != "cuda" or not path:
        return None, None, ""
    net = read_nccl_network("\n".join(p.read_text(errors="replace") for p in Path(path).parent.glob("nccl.*.log")))
    if net is None:
        return None, None, ""
    try:
        hcas: int | None = len({p.hca for p in LinuxMachine().ib_ports() if p.link_layer.lower() == "infiniband"})
    except HardwareUnavailable:
        hcas = None
    status, reason, _ = judge_transport(net, None, hcas, socket_causes(net))
    return net.path_summary or None, status.value, reason


def _timed(block: AbstractContextManager[None] | None) -> AbstractContextManager[None]:
    """The step timer's block, or nothing when the timer is off."""
    return block or nullcontext()


def train(cfg: TrainConfig, env: DistEnv, launcher: str | None = None) -> TrainReport | None:
    """Train as one rank; rank 0 returns the report, the others None."""
    torch = require_torch()
    dist = torch.distributed
    from torch.nn.parallel import DistributedDataParallel
    from gpuval.workloads.train.model import SmallResNet, SyntheticImages

    torch.manual_seed(cfg.seed)
    flight.turn_on(os.environ)  # before the process group is made: torch reads its variables then
    device, backend = join(torch, env, cfg.backend, cfg.timeout_s)
    timer = StepTimer(every=cfg.step_report) if cfg.step_report else None
    pipe = flight.serve_pipe(torch, backend, env.rank, os.environ)
    try:
        model = SmallResNet(cfg.classes, cfg.width).to(device)
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=0.9)
        data = SyntheticImages(cfg.seed, cfg.classes, cfg.image_size)
        if timer is not None:
            timer.attach(ddp)
        losses, times = [], []
        for step in range(cfg.steps):
            with _timed(timer and timer.step()):
                images, labels = (t.to(device) for t in data.batch(env.rank, step, cfg.batch_size))
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(ddp(images), labels)
                loss.backward()
                opt.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
                mean_loss = loss.detach().clone()
                with _timed(timer and timer.wait()):
                    dist.all_reduce(mean_loss)  # the job's loss, not one rank's
                losses.append(mean_loss.item() / env.world_size)
        who: list[Any] = [None] * env.world_size
        dist.all_gather_object(who, (os.getpid(), socket.gethostname()))
        dist.barrier()  # no rank tears its connections down while a peer still finishes the last collective
    except GpuvalError:
        raise
    except Exception as exc:  # a peer died or timed out
        raise EngineError(f"rank {env.rank}: {first_line(exc)}") from None
    finally:
        if timer is not None:
            timer.close()  # its last window, and its state file removed even when a peer failed
        if pipe is not None:
            pipe.close()
        leave_group(torch)
    if env.rank != 0:
        return None
    timed = times[cfg.warmup_steps:] or times
    transport, transport_status, transport_reason = _nccl_transport(device)
    return TrainReport(
        world_size=env.world_size, launcher=launcher or env.launcher, backend=backend, device=str(device),
        samples_per_s=env.world_size * cfg.batch_size * len(timed) / sum(timed),
        step_time_p50_s=statistics.median(timed), step_time_p95_s=percentile(timed, 95),
        loss_first=losses[0], loss_last=losses[-1], timed_steps=len(timed),
        pids=[p for p, _ in who], hosts=sorted({h for _, h in who}), nccl_transport=transport,
        transport_status=transport_status, transport_reason=transport_reason,
    )


def main(argv: list[str]) -> int:
    """Entry point of a launched rank: `python -m gpuval.workloads.train.worker REQUEST.json`."""
    req = TrainRequest.model_validate_json(Path(argv[0]).read_text())
    env = detect()
    if env is None and req.nprocs == 1:  # accelerate starts a lone process without any rank variables
        env = DistEnv(0, 1, 0, 1, 0, "127.0.0.1", free_port(), req.launcher)
    if env is None:
        print("error: this module is started by gpuval train through torchrun or accelerate", file=sys.stderr)
        return EXIT_CANNOT_RUN
    def work() -> int:
        report = train(req.config, env, req.launcher)
        if report is not None:
            Path(req.report_path).write_text(json.dumps(report.model_dump()))
        return 0

    return rank_exit_code(work)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
