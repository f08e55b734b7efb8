"""gpuval's all_reduce against a minimal hand-written torch.distributed loop, same ranks, sizes, dtype, iterations.

gpuval's in-place column is compared: the same call on one buffer as the reference (gloo has no out-of-place
all_reduce; gpuval's out-of-place column there adds a copy into the receive buffer, which is timed).
Both run here, in one invocation, interleaved (reference, gpuval, gpuval, reference, ...), best of --repeats per size,
so load from elsewhere on the machine hits both alike. Prints busbw of each and the ratio gpuval / reference per size.
Target: ratio >= 0.95 from 1 MiB up, with 2 and 4 CPU (gloo) ranks.

    python benchmarks/harness_overhead.py [--ranks 2,4] [--sizes 1M,4M,16M,64M] [--iters 20] [--warmup 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpuval.collectives.sizes import format_size, parse_size


def _reference_rank(rank: int, nranks: int, port: int, sizes: list[int], iters: int, warmup: int, out: str) -> None:
    """The loop a person would write: one float32 buffer, warm-up, barrier, timed all_reduce calls."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks,
                            timeout=timedelta(minutes=10))
    busbw = {}
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(buf)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(seconds)  # average over ranks, as nccl-tests' default -a 1
        algbw = size / 1e9 / (seconds.item() / nranks)
        busbw[size] = algbw * 2 * (nranks - 1) / nranks
    if rank == 0:
        Path(out).write_text(json.dumps(busbw))
    dist.destroy_process_group()


def reference(nranks: int, sizes: list[int], iters: int, warmup: int) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "ref.json")
        port = 20000 + os.getpid() % 20000
        mp.spawn(_reference_rank, args=(nranks, port, sizes, iters, warmup, out), nprocs=nranks)
        return {int(k): v for k, v in json.loads(Path(out).read_text()).items()}


def gpuval(nranks: int, sizes: list[int], iters: int, warmup: int) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gpuval.json"
        factor = sizes[1] // sizes[0] if len(sizes) > 1 else 1
        subprocess.run(
            [sys.executable, "-m", "gpuval", "bench", "all_reduce", "-b", str(sizes[0]), "-e", str(sizes[-1]),
             "-f", str(factor), "-n", str(iters), "-w", str(warmup), "--nprocs", str(nranks), "--json", str(out),
             "--results", str(Path(tmp) / "r.jsonl")],
            check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, GPUVAL_DB="none"),
        )
        rows = json.loads(out.read_text())["results"]
        # the in-place column: the call the reference loop makes (gloo's out-of-place all_reduce adds a timed copy)
        return {r["size"]: r["in_place"]["bus_bw"] for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--sizes", default="1M,4M,16M,64M", help="geometric: each size a fixed factor of the last")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"all_reduce float32, gloo on CPU, iters {args.iters}, warm-up {args.warmup}, best of {args.repeats}")
    print(f"{'ranks':>5} {'size':>6} {'reference GB/s':>15} {'gpuval GB/s':>12} {'ratio':>6}")
    for nranks in (int(r) for r in args.ranks.split(",")):
        best_ref: dict[int, float] = {}
        best_ours: dict[int, float] = {}
        pair = [(best_ref, reference), (best_ours, gpuval)]
        for repeat in range(args.repeats):
            for best, run in pair if repeat % 2 == 0 else pair[::-1]:  # alternate who goes first
                for size, bw in run(nranks, sizes, args.iters, args.warmup).items():
                    best[size] = max(best.get(size, 0.0), bw)
        for size in sizes:
            ratio = best_ours[size] / best_ref[size]
            print(f"{nranks:>5} {format_size(size):>6} {best_ref[size]:>15.3f} {best_ours[size]:>12.3f} {ratio:>6.3f}")


if __name__ == "__main__":
    main()
