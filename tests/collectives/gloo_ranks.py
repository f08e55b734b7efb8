"""One gloo rank of the `-c` scenarios, started by tests/helpers/forked_ranks.py for test_check.py: the scenarios
named in argv, one after another in one process group (each puts back what it replaced); rank 0 prints one JSON line
per result, tagged with its scenario.

Scenarios:
- noop: for every collective and side, time it, then run the driver's check with a launch that does nothing (a stale
  buffer): the wrong elements must be counted. Then the real check: none.
- premulsum: float avg computed as NCCL does it (each rank multiplies by T(1/n), then a sum), on every float type.
- alias: in-place alltoall and sendrecv aliased as on NCCL: N/A, never counted.
- aggregate: -m 3 on gloo, counting the launches.
"""

import itertools
import json
import sys

import torch
import torch.distributed as dist

from gpuval.collectives import catalog, driver
from gpuval.collectives.catalog import COLLECTIVES, Context, dtype_named
from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.collectives.torch_path import TorchRunner
from gpuval.node.dist_env import detect

env = detect()
dist.init_process_group("gloo", init_method=env.init_method, rank=env.rank, world_size=env.world_size)
CPU = torch.device("cpu")


def emit(**fields):
    if env.rank == 0:
        print(json.dumps({"scenario": scenario, **fields}), flush=True)


def noop():
    for name, coll in COLLECTIVES.items():
        for in_place in (False, True):
            ctx = Context(env.rank, env.world_size, dtype_named("float"), "sum", env.world_size - 1, CPU)
            counts = coll.counts(3000, env.world_size, 4)
            bufs = TorchRunner(ctx).prepare(coll, counts, in_place)
            for i in range(3):  # the timed launches leave a correct result of rep 0 in the receive buffer
                bufs.launch(i)
            reps = itertools.count(1)
            real_launch = bufs.launch
            bufs.launch = lambda i=0: None
            stale = driver._count_wrong(torch, bufs, 1, False, CPU, reps)
            bufs.launch = real_launch
            fresh = driver._count_wrong(torch, bufs, 2, False, CPU, reps)
            emit(collective=name, in_place=in_place, noop_wrong=stale, real_wrong=fresh,
                 elements=counts.recv)


def premulsum():
    def nccl_avg(self, dist_, buf, op, ctx):
        # NCCL's ncclAvg on floats: PreMulSum with scalar T(1/n), i.e. each rank x*(1/n) rounded, then a sum
        tmul = torch.float64 if buf.dtype == torch.float64 else torch.float32
        buf.copy_((buf.to(tmul) * torch.tensor(1.0 / ctx.nranks, dtype=tmul)).to(buf.dtype))
        dist_.all_reduce(buf, op=dist_.ReduceOp.SUM)
        return True

    real = catalog.AllReduce._reduce
    catalog.AllReduce._reduce = nccl_avg
    for dtype in ("half", "bfloat16", "float", "double"):
        cfg = BenchConfig(collective="all_reduce", dtype=dtype, op="avg", min_bytes=4096, max_bytes=1 << 20,
                          step_factor=16, iters=1, warmup=0, check=2)
        table = run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None)
        emit(dtype=dtype, wrong=table.total_wrong(), rows=len(table.rows))
    catalog.AllReduce._reduce = real


def alias():
    real = catalog.can_alias
    catalog.can_alias = lambda ctx: True  # NCCL's in-place alltoall / sendrecv: one buffer for both directions
    for name in ("alltoall", "sendrecv"):
        cfg = BenchConfig(collective=name, min_bytes=1024, max_bytes=4096, step_factor=4, iters=1, warmup=0)
        table = run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None)
        emit(collective=name, out_of_place=[r.out_of_place.nwrong for r in table.rows],
             in_place=[r.in_place.nwrong for r in table.rows], total=table.total_wrong())
    catalog.can_alias = real


def aggregate():
    calls = []
    real = dist.all_reduce

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    dist.all_reduce = counting
    cfg = BenchConfig(collective="all_reduce", min_bytes=1024, max_bytes=1024, iters=4, warmup=0, agg_iters=3,
                      check=0)
    run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None)
    dist.all_reduce = real
    # per side: 1 untimed launch + 4 iterations x 3 aggregated calls; plus the 2 -a time reductions
    emit(all_reduce_calls=len(calls))


for scenario in sys.argv[1:]:
    {"noop": noop, "premulsum": premulsum, "alias": alias, "aggregate": aggregate}[scenario]()
dist.destroy_process_group()
