"""A real hang of a gloo job with two process groups, each rank's Flight Recorder on and its dump pipe served by
gpuval's training workload (gpuval.workloads.train.flight): `python tests/helpers/forked_ranks.py N
tests/helpers/flight_hang.py OUT SCENARIO [--collect]` (N even; OUT an existing folder).

Every rank joins the world group (data parallel) and a pair group `tp` ([0, 1], [2, 3], ...), and runs STEPS
steps, each a tensor-parallel all_reduce in its pair and a data-parallel all_reduce in the world. Then rank 1:
- `stop`: stops before its pair's next all_reduce (it waits on an event that never comes: a rank stuck in Python);
- `desync`: skips its pair's all_reduce and goes on to the world's (two ranks each wait for the other).
Every rank writes `OUT/hung-<rank>` just before the call it hangs in. The dumps go to `OUT/rank_<rank>`, the pipes
are `OUT/rank_<rank>.pipe`. With `--collect`, rank 0 (its main thread hung, a thread of its own) asks every rank
for its dump through its pipe as a probe would (gpuval.node.flight_recorder.collect_rank_dumps), writes its own in
torch's JSON form too (`OUT/rank_0.json`), then ends the job (the launcher, and with it every rank); without, the job hangs until killed: a test plays the probe.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from gpuval.hooks import StepTimer
from gpuval.workloads.train.flight import serve_pipe

STEPS = 3


def tensor_parallel_reduce(grad: torch.Tensor, pair: dist.ProcessGroup) -> None:
    dist.all_reduce(grad, group=pair)


def data_parallel_reduce(grad: torch.Tensor) -> None:
    dist.all_reduce(grad)


def collect(out: Path, world: int) -> None:
    """Rank 0's thread: once every rank is hung, each dump through its pipe; then the job ends."""
    from gpuval.node.flight_recorder import DumpRequest, collect_rank_dumps

    while not all((out / f"hung-{r}").exists() for r in range(world)):
        time.sleep(0.1)
    time.sleep(1.0)  # each rank is in its blocking call by now
    requests = [DumpRequest(rank, os.environ, out / "rank_", os.getuid()) for rank in range(world)]
    for got in collect_rank_dumps(requests, wait_s=60):
        print(f"rank {got.rank}: {got.source} {got.path} {got.note}", flush=True)
    (out / "rank_0.json").write_bytes(torch._C._distributed_c10d._dump_fr_trace_json())  # torch's JSON form
    os.kill(os.getppid(), signal.SIGTERM)  # the launcher: its ranks die with it (PR_SET_PDEATHSIG)


def _waited(timer: StepTimer | None) -> AbstractContextManager[None]:
    return timer.wait() if timer is not None else nullcontext()


def main(out: Path, scenario: str, gather: bool, gpuval: bool) -> None:
    """With `gpuval` (`--gpuval`), each rank runs as gpuval's training workload runs one: the recorder turned on at
    gpuval's stem in the rank's state folder (its dumps and pipes there, not in OUT) and a step timer keeping the
    rank's state (each collective in `timer.wait()`), so that a probe of the job takes it as the job's rank."""
    timer = None
    if gpuval:
        from gpuval.workloads.train.flight import turn_on

        turn_on(os.environ)
        timer = StepTimer(every=1000)
    else:
        os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] = str(out / "rank_")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pairs = [dist.new_group([r, r + 1], group_desc="tp") for r in range(0, world, 2)]
    pair = pairs[rank // 2]
    serve_pipe(torch, "gloo", rank, os.environ)
    grad = torch.full((64, 4), float(rank))
    for _ in range(STEPS):
        if timer is not None:
            timer.begin()
        with _waited(timer):
            tensor_parallel_reduce(grad, pair)
        with _waited(timer):
            data_parallel_reduce(grad)
        if timer is not None:
            timer.end()
    if gather and rank == 0:
        threading.Thread(target=collect, args=(out, world), daemon=True).start()
    if timer is not None:
        timer.begin()
    (out / f"hung-{rank}").touch()
    if rank == 1 and scenario == "stop":
        threading.Event().wait()  # stuck in Python: never enters the pair's next all_reduce
    if not (rank == 1 and scenario == "desync"):
        with _waited(timer):
            tensor_parallel_reduce(grad, pair)
    with _waited(timer):
        data_parallel_reduce(grad)
    threading.Event().wait()  # the ranks that got through wait here for the end


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], "--collect" in sys.argv[3:], "--gpuval" in sys.argv[3:])
