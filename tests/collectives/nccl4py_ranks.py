"""One rank of the direct-path scenarios (NCCL through nccl4py's bindings, here the stand-in in
tests/helpers/fake_nccl4py over gloo), started by tests/helpers/forked_ranks.py for test_direct.py; rank 0 prints
one JSON line per result, tagged with its scenario.

The scenarios named in argv run one after another, each joining its own process group (SCENARIO or
SCENARIO:ARG,ARG...); with CALL_LOGS set (a folder), each one's calls to the stand-in are logged in
CALL_LOGS/SCENARIO.jsonl. Scenarios:
- noop: every collective and side timed, then checked with a launch that does nothing: wrong elements counted.
- sweep:COLLECTIVE,MINBYTES,MAXBYTES,ITERS,WARMUP,AGG: one sweep (the test reads the stand-in's call log).
- gpu_rank:COLLECTIVE: one rank of `gpuval bench COLLECTIVE --via nccl4py` (run_rank, as a spawned rank runs it)
  whose device answers as a GPU rank's does (rank_device: backend nccl), on the CPU: the rank itself chooses the
  backend of its process group.
- fleet_rank:COLLECTIVE: one rank of a fleet pair test (`gpuval fleet rank-test`), likewise a GPU rank, NCCL through
  nccl4py; it prints its tagged lines and ends the process as the fleet's ranks do (so it comes last).
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from gpuval.collectives import driver
from gpuval.collectives.catalog import COLLECTIVES
from gpuval.collectives.direct import choose_path
from gpuval.collectives.driver import BenchConfig, run_sweep
from gpuval.node.dist_env import detect

env = detect()
CPU = torch.device("cpu")


def emit(**fields):
    if env.rank == 0:
        print(json.dumps({"scenario": scenario, **fields}), flush=True)


def sides(table):
    return ([None if r.out_of_place is None else r.out_of_place.nwrong for r in table.rows],
            [None if r.in_place is None else r.in_place.nwrong for r in table.rows])


def joined(work):
    def run(*args):
        dist.init_process_group("gloo", init_method=env.init_method, rank=env.rank, world_size=env.world_size)
        work(choose_path("nccl4py", False), *args)
        dist.destroy_process_group()
    return run


@joined
def noop(path):
    real = driver._count_wrong

    def stale(torch_, bufs, checks, on_gpu, device, reps):
        bufs.launch = lambda i=0: None  # the check launch does nothing: the receive side keeps the sentinel
        return real(torch_, bufs, checks, on_gpu, device, reps)

    driver._count_wrong = stale
    for name in COLLECTIVES:
        cfg = BenchConfig(collective=name, min_bytes=3072, max_bytes=3072, iters=1, warmup=0, root=env.world_size - 1)
        out, inp = sides(run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None, path=path))
        emit(collective=name, out_of_place=out, in_place=inp)
    driver._count_wrong = real


@joined
def sweep(path, name, low, high, iters, warmup, agg):
    cfg = BenchConfig(collective=name, min_bytes=int(low), max_bytes=int(high), step_factor=2, iters=int(iters),
                      warmup=int(warmup), agg_iters=int(agg))
    table = run_sweep(cfg, env.rank, env.world_size, CPU, lambda row: None, path=path)
    out, inp = sides(table)
    emit(sizes=[r.size for r in table.rows], counts=[r.count for r in table.rows], out_of_place=out, in_place=inp)


def as_on_a_gpu_node(torch_, backend, local_rank):
    return CPU, "nccl"


def on_gpu_nodes():
    """Every rank_device a rank asks answers as on a GPU node (backend nccl), on the CPU."""
    import importlib.util

    for where in ("gpuval.workloads.ranks", "gpuval.workloads.collective.rank"):  # wherever the bench asks
        module = importlib.import_module(where) if importlib.util.find_spec(where) else None
        if hasattr(module, "rank_device"):
            module.rank_device = as_on_a_gpu_node


def gpu_rank(name):
    from gpuval.workloads.collective.run import BenchRequest, run_rank

    on_gpu_nodes()
    cfg = BenchConfig(collective=name, min_bytes=1024, max_bytes=2048, step_factor=2, iters=2, warmup=1, via="nccl4py")
    table = run_rank(BenchRequest(config=cfg, run_id="one-comm", quiet=True, record=False), env)
    emit(wrong=table.total_wrong(), rows=len(table.rows))


def fleet_rank(name):
    from gpuval.fleet.run import node_worker

    on_gpu_nodes()
    sample = node_worker.sample_config
    node_worker.sample_config = lambda *a: sample(*a).model_copy(update={"via": "nccl4py"})
    node_worker.rank_test(node_worker.RankTestRequest(round=0, test="t0", collectives=(name,), samples=2, size=1024,
                                                      iters=2, warmup=1, backend="auto", timeout=60))


SCENARIOS = {"noop": noop, "sweep": sweep, "gpu_rank": gpu_rank, "fleet_rank": fleet_rank}
for scenario, _, args in (arg.partition(":") for arg in sys.argv[1:]):
    if os.environ.get("CALL_LOGS"):
        os.environ["GPUVAL_FAKE_NCCL4PY_LOG"] = os.path.join(os.environ["CALL_LOGS"], f"{scenario}.jsonl")
    SCENARIOS[scenario](*filter(None, args.split(",")))
