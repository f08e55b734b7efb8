"""One rank of a real 2-rank all_reduce in which rank 1 corrupts 3 elements of every result after the collective;
the real driver must count them. Exit code as `gpuval bench` gives it."""

import sys

from gpuval.collectives import catalog
from gpuval.collectives.driver import BenchConfig
from gpuval.node.dist_env import detect
from gpuval.workloads.collective.run import BenchRequest, exit_code, run_rank

env = detect()
real_launch = catalog.AllReduce.torch_launch


def corrupting_launch(self, ctx, data):
    launch = real_launch(self, ctx, data)

    def corrupted(i=0):
        launch(i)
        if ctx.rank == 1:
            data.recv[:3] += 1  # a planted wrong result

    return corrupted


catalog.AllReduce.torch_launch = corrupting_launch
cfg = BenchConfig(collective="all_reduce", min_bytes=1024, max_bytes=4096, step_factor=2, iters=2, warmup=1)
req = BenchRequest(config=cfg, run_id="planted", results_path=sys.argv[1], json_path=sys.argv[2])
sys.exit(exit_code(run_rank(req, env)))
