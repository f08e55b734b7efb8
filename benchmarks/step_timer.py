"""What gpuval.hooks' StepTimer costs a training step: the same DDP loop with and without it, 2 gloo ranks on CPU.

Each rank holds three DDP copies of one small model: two plain ones and one with the timer attached (a
communication hook cannot be taken off a DDP model once registered). The plain copies run torch's own all-reduce
hook (default_hooks.allreduce_hook, the one the timer wraps), so the copies differ only by the timer. Blocks of
steps rotate between the three after a barrier, so load from elsewhere on the machine hits all alike; each figure
is the median block time. The two plain copies against each other are the noise floor of this machine in this run:
a timer ratio inside it is no measured cost. The timer reports every --every steps (records go to /dev/null:
written, not kept), so the report's cost is in. Also timed apart: the timer's own work per step (a step, a wait,
and as many calls of its communication hook as the model has buckets, around an all-reduce already done), against
the plain step measured in the same run.

Prints the ratios. Target: under 1% (ratio < 1.01).

    python benchmarks/step_timer.py [--blocks 18] [--steps 20] [--every 10] [--width 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from gpuval.hooks import StepTimer
from gpuval.hooks.timer import _HookState, _timed_hook
from gpuval.node.dist_env import free_port

NAMES = ["plain", "plain again", "timed"]


def _model(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


def _steps(model: DistributedDataParallel, opt: torch.optim.Optimizer, batch: torch.Tensor, n: int,
           timer: StepTimer | None) -> float:
    """`n` training steps (each timed when `timer` is given) after a barrier; their wall time."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        if timer is None:
            model(batch).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            with timer.step():
                model(batch).square().mean().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def _bookkeeping(timer: StepTimer, buckets: int, n: int = 20000) -> float:
    """Seconds per step of the timer's own work: a step, a wait, and `buckets` calls of its communication hook
    around a hook whose all-reduce is already done (the hook's launch, torch's Future.then and the completion)."""
    done = torch.futures.Future()
    done.set_result(torch.zeros(1))
    hook = _HookState(timer, lambda _state, _bucket: done, None)
    start = time.perf_counter()
    for _ in range(n):
        with timer.step():
            for _ in range(buckets):
                _timed_hook(hook, None).wait()
            with timer.wait():
                pass
    return (time.perf_counter() - start) / n


def _rank(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(minutes=10))
    models = {name: DistributedDataParallel(_model(args.width)) for name in NAMES}
    for name in NAMES[:2]:
        models[name].register_comm_hook(None, allreduce_hook)
    sink = open(os.devnull, "w")  # noqa: SIM115 (open for the whole run)
    timer = StepTimer(every=args.every, stream=sink, state_dir=Path(out).parent / f"state-{rank}")
    timer.attach(models["timed"])
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}
    batch = torch.randn(args.batch, args.width)
    times: dict[str, list[float]] = {name: [] for name in NAMES}
    for block in range(-1, args.blocks):  # block -1 warms up: allocation, DDP's buckets, the hook's first calls
        for name in NAMES[block % 3:] + NAMES[:block % 3]:
            took = _steps(models[name], opts[name], batch, args.steps, timer if name == "timed" else None)
            if block >= 0:
                times[name].append(took)
    timed = models["timed"]
    before = timer._seq
    _steps(timed, opts["timed"], batch, 1, timer)
    buckets = max(timer._seq - before, 1)  # the hook's launches in one step: one per DDP bucket
    own = _bookkeeping(StepTimer(every=args.every, stream=sink, state_dir=Path(out).parent / f"own-{rank}",
                                 stacks=False), buckets)
    timer.close()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        medians = [statistics.median(times[name]) for name in NAMES]
        Path(out).write_text(" ".join(str(v) for v in [*medians, medians[0] / args.steps, own]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=18)
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--every", type=int, default=10, help="the timer's report interval")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "figures")
        mp.spawn(_rank, args=(free_port(), args, out), nprocs=2)
        plain, again, timed, step, own = (float(v) for v in Path(out).read_text().split())
    print(f"step timer, 2 gloo ranks, MLP width {args.width}, batch {args.batch}: median block of {args.steps} "
          f"steps over {args.blocks} blocks each")
    print(f"  noise floor: plain {plain * 1e3:.1f} ms, the other plain copy {again * 1e3:.1f} ms: ratio "
          f"{again / plain:.4f} ({(again / plain - 1):+.2%})")
    print(f"  with the timer {timed * 1e3:.1f} ms against plain {plain * 1e3:.1f} ms: ratio {timed / plain:.4f} "
          f"({(timed / plain - 1):+.2%})")
    print(f"  the timer's own work {own * 1e6:.1f} us a step against a {step * 1e3:.2f} ms step: ratio "
          f"{1 + own / step:.4f} ({own / step:+.3%})")


if __name__ == "__main__":
    main()
