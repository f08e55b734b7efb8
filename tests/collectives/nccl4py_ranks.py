"""One rank of the direct-path scenarios (NCCL through nccl4py's bindings, here the stand-in in
tests/helpers/fake_nccl4py over gloo), started by torchrun from test_direct.py; rank 0 prints one JSON line each.

Scenarios (argv[1]):
- matrix: every collective, out-of-place and in-place, for a few types and reductions: wrong elements per side.
- noop: every collective and side timed, then checked with a launch that does nothing: wrong elements counted.
- sweep COLLECTIVE MINBYTES MAXBYTES ITERS WARMUP AGG: one sweep (the test reads the stand-in's call log).
"""

import json
import sys

import torch
import torch.distributed as dist

from gpuval.collectives import driver
from gpuval.collectives.catalog import COLLECTIVES
from gpuval.collectives.direct import choose_path
from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.node.dist_env import detect

env = detect()
dist.init_process_group("gloo", init_method=env.init_method, rank=env.rank, world_size=env.world_size)
CPU = torch.device("cpu")
PATH = choose_path("nccl4py", False)


def emit(**fields):
    if env.rank == 0:
        print(json.dumps(fields), flush=True)


def sides(table):
    return ([None if r.out_of_place is None else r.out_of_place.nwrong for r in table.rows],
            [None if r.in_place is None else r.in_place.nwrong for r in table.rows])


def matrix():
    for name, coll in COLLECTIVES.items():
        for dtype, op in (("float", "sum"), ("int32", "max"), ("bfloat16", "avg"), ("int8", "prod")):
            if not coll.reduces and op != "sum":
                continue
            cfg = BenchConfig(collective=name, dtype=dtype, op=op, min_bytes=96, max_bytes=24 * 1024, step_factor=16,
                              iters=2, warmup=1, check=2, root=env.world_size - 1)
            table = run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None, path=PATH)
            out, inp = sides(table)
            emit(collective=name, dtype=dtype, op=op, out_of_place=out, in_place=inp, path=PATH.describe())


def noop():
    real = driver._count_wrong

    def stale(torch_, bufs, checks, on_gpu, device, reps):
        bufs.launch = lambda i=0: None  # the check launch does nothing: the receive side keeps the sentinel
        return real(torch_, bufs, checks, on_gpu, device, reps)

    driver._count_wrong = stale
    for name in COLLECTIVES:
        cfg = BenchConfig(collective=name, min_bytes=3072, max_bytes=3072, iters=1, warmup=0, root=env.world_size - 1)
        out, inp = sides(run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None, path=PATH))
        emit(collective=name, out_of_place=out, in_place=inp)


def sweep(name, low, high, iters, warmup, agg):
    cfg = BenchConfig(collective=name, min_bytes=int(low), max_bytes=int(high), step_factor=2, iters=int(iters),
                      warmup=int(warmup), agg_iters=int(agg))
    table = run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None, path=PATH)
    out, inp = sides(table)
    emit(sizes=[r.size for r in table.rows], counts=[r.count for r in table.rows], out_of_place=out, in_place=inp)


{"matrix": matrix, "noop": noop, "sweep": sweep}[sys.argv[1]](*sys.argv[2:])
dist.destroy_process_group()
