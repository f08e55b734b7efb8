"""What a local `gpuval bench --nprocs N` costs in CPU and time, against the floor it cannot beat, in one run.

Its ranks are forked from one starter that imported torch once (gpuval.workloads.rank_starter). Interleaved rounds,
each a fresh process tree, so load from elsewhere on the machine hits all alike:

- the floor: one `python -c "import torch, torch.distributed"`: what any rank of a local run must pay once;
- N interpreters importing torch at once: what N ranks started as separate interpreters paid before they did
  anything (the way gpuval started ranks until the starter);
- `gpuval bench all_reduce -b 1K -e 1K --nprocs N --backend gloo`: the whole local run, CLI, starter, ranks,
  rendezvous, one size, teardown;
- the same at 1 MiB x 16 cycles (`-N 16`, what a fleet's in-node test measures), as gpuval runs it (one intra-op
  thread per rank, workloads.ranks.share_cores) and with a thread per core in every rank (OMP_NUM_THREADS set to
  the cores: torch's own default, what the ranks had before): the ranks' threads spinning against each other.

CPU is user + system of the whole tree (getrusage of reaped children: the starter reaps its ranks). Prints the median
CPU seconds and wall seconds of each, and the ratios over the floor.

    python benchmarks/rank_start.py [--nprocs 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORT = [sys.executable, "-c", "import torch, torch.distributed"]


def _run(argvs: list[list[str]], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of these commands started at once (environment `env`, else this one's), until
    all have ended."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) for argv in argvs]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            sys.exit(f"benchmark: {' '.join(proc.args)} failed: {err.decode()[-500:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nprocs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cores = str(len(os.sched_getaffinity(0)))
    own = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with tempfile.TemporaryDirectory() as tmp:
        def bench(size: str, *more: str) -> list[str]:
            return [sys.executable, "-m", "gpuval", "bench", "all_reduce", "-b", size, "-e", size, *more, "--nprocs",
                    str(args.nprocs), "--backend", "gloo", "--results", str(Path(tmp) / "r.jsonl")]

        cycles = bench("1M", "-N", "16")
        kinds = {"floor: one import of torch": ([IMPORT], own),
                 f"{args.nprocs} interpreters importing torch": ([IMPORT] * args.nprocs, own),
                 f"gpuval bench --nprocs {args.nprocs}": ([bench("1K")], own),
                 "  1 MiB -N 16, one thread per rank": ([cycles], own),
                 f"  1 MiB -N 16, OMP_NUM_THREADS={cores} per rank": ([cycles], {**own, "OMP_NUM_THREADS": cores})}
        seen: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind, (argvs, env) in kinds.items():
                seen[kind].append(_run(argvs, env))
    floor_cpu = statistics.median(c for c, _ in seen["floor: one import of torch"])
    floor_wall = statistics.median(w for _, w in seen["floor: one import of torch"])
    print(f"{'':44} {'cpu s':>7} {'wall s':>7} {'cpu/floor':>9} {'wall/floor':>10}   (median of {args.rounds})")
    for kind, runs in seen.items():
        cpu, wall = statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)
        print(f"{kind:44} {cpu:7.2f} {wall:7.2f} {cpu / floor_cpu:9.2f} {wall / floor_wall:10.2f}")


if __name__ == "__main__":
    main()
