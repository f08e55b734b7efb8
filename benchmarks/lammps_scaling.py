"""LAMMPS strong scaling 1 -> 2 MPI ranks on the LJ melt (bench/in.lj, 32,000 atoms, 100 steps), one run each.

Prints timesteps/s at 1 and 2 ranks, measured in the same run, the speed-up and the parallel efficiency.
Usage: python benchmarks/lammps_scaling.py [--benchmark lj|chute] [--repeat N]  (best of N per rank count)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from gpuval.workloads.lammps.run import LammpsConfig, sweep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="lj")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cfg = LammpsConfig(benchmark=args.benchmark)
    best: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for record in sweep(cfg, [1, 2], f"bench-{i}", results_path=Path(tmp) / "results.jsonl"):
                ranks, rate = record.params["ranks"], record.metric("timesteps_per_s").value
                best[ranks] = max(best.get(ranks, 0.0), rate)
    speedup = best[2] / best[1]
    print(f"LAMMPS {args.benchmark}: 1 rank {best[1]:.2f} timesteps/s, 2 ranks {best[2]:.2f} timesteps/s "
          f"(best of {args.repeat})")
    print(f"speed-up 2/1 = {speedup:.3f}, parallel efficiency = {speedup / 2:.1%}")


if __name__ == "__main__":
    main()
