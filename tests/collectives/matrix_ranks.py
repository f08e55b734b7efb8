"""One rank of the collective x dtype x op matrix, started by tests/helpers/forked_ranks.py for test_exact.py: runs
the real driver for every combination on one path and prints, on rank 0, one JSON line per combination with its
wrong elements per row and side. Arguments: the path (`torch`: torch.distributed on gloo; `nccl4py`: NCCL through
nccl4py's bindings, here the stand-in in tests/helpers/fake_nccl4py), the reducing collectives' ops
(comma-separated), then the dtypes to cover (default: every one). Two rows each, one sweep: 96 B (a 4-rank
collective's share per rank a few elements) and 24K."""

import json
import sys

import torch
import torch.distributed as dist

from gpuval.collectives.catalog import COLLECTIVES, DTYPES
from gpuval.collectives.direct import choose_path
from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.node.dist_env import detect

env = detect()
dist.init_process_group("gloo", init_method=env.init_method, rank=env.rank, world_size=env.world_size)
path = choose_path(sys.argv[1], on_gpu=False)
ops = sys.argv[2].split(",")


def nwrong(side):
    return None if side is None else side.nwrong


for name, coll in COLLECTIVES.items():
    for dtype in sys.argv[3:] or DTYPES:
        for op in ops if coll.reduces else ("sum",):
            cfg = BenchConfig(collective=name, dtype=dtype, op=op, min_bytes=96, max_bytes=24 * 1024, step_factor=256,
                              iters=1, warmup=0, root=env.world_size - 1)
            table = run_sweep(cfg, env.rank, env.world_size, torch.device("cpu"), lambda row: None, path=path)
            if env.rank == 0:
                print(json.dumps({"collective": name, "dtype": dtype, "op": op, "path": path.describe(),
                                  "out_of_place": [nwrong(r.out_of_place) for r in table.rows],
                                  "in_place": [nwrong(r.in_place) for r in table.rows]}), flush=True)
dist.destroy_process_group()
sys.exit(0)
