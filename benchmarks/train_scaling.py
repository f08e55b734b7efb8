"""Training throughput 1 -> 2 ranks (torch DDP, gloo on CPU / nccl on GPUs), both measured in the same run.

Prints samples/s at 1 and 2 ranks, the ratio and the scaling efficiency.
Usage: python benchmarks/train_scaling.py [--launcher torchrun|accelerate] [--steps 40] [--repeat N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from gpuval.workloads.train.run import sweep
from gpuval.workloads.train.worker import TrainConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", default="torchrun")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    cfg = TrainConfig(steps=args.steps)
    best: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for record in sweep(cfg, [1, 2], args.launcher, f"bench-{i}", Path(tmp) / "results.jsonl"):
                size, rate = int(record.metric("world_size").value), record.metric("samples_per_s").value
                best[size] = max(best.get(size, 0.0), rate)
    ratio = best[2] / best[1]
    print(f"train ({args.launcher}, {cfg.batch_size} images/rank/step): 1 rank {best[1]:.1f} samples/s, "
          f"2 ranks {best[2]:.1f} samples/s (best of {args.repeat})")
    print(f"throughput ratio 2/1 = {ratio:.3f}, scaling efficiency = {ratio / 2:.1%}")


if __name__ == "__main__":
    main()
