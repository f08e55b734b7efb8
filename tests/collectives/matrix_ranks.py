"""One rank of the dtype x op matrix, started by torchrun: runs the real driver for every combination and
prints, on rank 0, one JSON line per combination with its wrong-element count. Arguments, if any: the dtypes to
cover (default: every one)."""

import json
import sys

import torch
import torch.distributed as dist

from gpuval.collectives.catalog import COLLECTIVES, DTYPES, OPS
from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.node.dist_env import detect

env = detect()
dist.init_process_group("gloo", init_method=env.init_method, rank=env.rank, world_size=env.world_size)
for name, coll in COLLECTIVES.items():
    for dtype in sys.argv[1:] or DTYPES:
        for op in OPS if coll.reduces else ("sum",):
            cfg = BenchConfig(collective=name, dtype=dtype, op=op, min_bytes=96, max_bytes=24 * 1024, step_factor=16,
                              iters=1, warmup=0, root=env.world_size - 1)
            table = run_sweep(cfg, env.rank, env.world_size, torch.device("cpu"), lambda row: None)
            if env.rank == 0:
                print(json.dumps({"collective": name, "dtype": dtype, "op": op, "rows": len(table.rows),
                                  "wrong": table.total_wrong()}), flush=True)
dist.destroy_process_group()
sys.exit(0)
