"""A small training job that uses gpuval.hooks the documented ways, started by the tests under torchrun, `accelerate
launch` (tests/helpers/timer_jobs.py) or on forked ranks (tests/helpers/forked_ranks.py):
`python timer_job.py MODE STEPS EVERY SLOW_MS [HANG]`.

MODE: ddp (DDP model, timer.attach), plain (a plain loop that all-reduces its gradients inside timer.wait(nbytes=)),
accelerate (Accelerator(cpu=True).prepare, timer.attach), or fsdp (FSDP2's fully_shard on each layer and the model,
which torch 2.13 runs on CPU with gloo, timer.attach: its process group's collectives timed). The last rank sleeps
SLOW_MS a step in its compute: the straggler. With HANG, the last rank stops itself (SIGSTOP) at step HANG and the others hang in the collective.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from gpuval.hooks import StepTimer


def main(mode: str, steps: int, every: int, slow_ms: float, hang_at: int | None) -> None:
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    timer = StepTimer(every=every)
    if mode == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        model, opt = accelerator.prepare(model, opt)
        timer.attach(model)
    else:
        dist.init_process_group("gloo")
        if mode == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
            timer.attach(model)
        elif mode == "fsdp":
            from torch.distributed.fsdp import fully_shard

            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer)
            fully_shard(model)
            timer.attach(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(steps):
        with timer.step():
            if rank == world - 1:
                if hang_at is not None and step == hang_at:
                    os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(slow_ms / 1000)
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            if mode == "plain":
                with timer.wait(nbytes=sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())):
                    for p in model.parameters():
                        dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
    timer.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    hang = int(sys.argv[5]) if len(sys.argv) > 5 else None
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), hang)
