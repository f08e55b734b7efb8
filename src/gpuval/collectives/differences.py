"""What still differs from nccl-tests 2.19 (src/common.cu), each note with the runs it applies to: the bench's
header prints the notes of the run that is printing (`# differs from nccl-tests: ...`) and its -J document keeps
them, so nobody compares figures blind.

What is the same as nccl-tests 2.19 is in driver.py's docstring; each note here is what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gpuval.collectives.direct import CommPath
from gpuval.collectives.driver import BenchConfig

_IN_PLACE_ONLY = ("all_reduce", "reduce", "broadcast")


@dataclass(frozen=True)
class Run:
    """What the notes depend on: the flags, whether the ranks drive GPUs, and the path that calls the collectives."""

    cfg: BenchConfig
    on_gpu: bool
    path: CommPath

    @property
    def torch(self) -> bool:
        """The collectives go through torch.distributed (gloo, or NCCL where nccl4py cannot load)."""
        return self.path.bindings is None

    @property
    def nccl4py(self) -> bool:
        return self.path.bindings is not None


@dataclass(frozen=True)
class Difference:
    """One note; `{allocator_why}` in its text is the path's reason for not allocating with ncclMemAlloc."""

    text: str
    applies: Callable[[Run], bool]


DIFFERENCES = (
    Difference("warm-up: -w launches of each size just before it is timed (nccl-tests 2.19: -w launches of every "
               "size first, default 1; gpuval keeps the older default of 5)", lambda r: True),
    Difference("timer: CUDA events on the rank's stream around the timed launches (nccl-tests 2.19: the host clock "
               "from before the first launch until it has seen the stream idle, which adds the host's completion "
               "latency): small sizes read up to about 1 us lower", lambda r: r.on_gpu and r.cfg.blocking != 3),
    Difference("process model: one process per GPU, its NCCL communicator the only one (as nccl-tests under mpirun "
               "-g 1; nccl-tests -t N -g 1 runs a thread per GPU in one process, -g N one thread driving N GPUs in "
               "one group): compare figures of more than one GPU with nccl-tests run one GPU per process or thread",
               lambda r: r.on_gpu),
    Difference("each NCCL call is one Python call through nccl4py's bindings (about 0.7 us of CPU each; sendrecv "
               "makes four per launch, alltoall before NCCL 2.28 two per rank): small sizes read that much above "
               "nccl-tests' C calls; -G removes it", lambda r: r.nccl4py),
    Difference("buffers from torch's caching allocator, not ncclMemAlloc as nccl-tests 2.19 ({allocator_why}): NCCL "
               "does not register them for NVLS under -G as it registers nccl-tests'",
               lambda r: r.nccl4py and r.path.allocator is None),
    Difference("buffers from torch's caching allocator (nccl-tests 2.19: ncclMemAlloc, which NCCL registers for NVLS "
               "under -G), and the barrier and -a's combine are NCCL calls on the measured communicator (nccl-tests: "
               "MPI or threads on the host)", lambda r: r.torch and r.on_gpu),
    Difference("all_reduce, reduce, broadcast through torch.distributed on NCCL: torch has no out-of-place form, the "
               "out-of-place columns are N/A",
               lambda r: r.torch and r.on_gpu and r.cfg.collective in _IN_PLACE_ONLY),
    Difference("all_reduce, reduce, broadcast on gloo: out-of-place copies the send buffer into the receive buffer, "
               "then the in-place call (gloo has no out-of-place form); the copy is timed",
               lambda r: r.torch and not r.on_gpu and r.cfg.collective in _IN_PLACE_ONLY),
    Difference("no buffer offset rotation between iterations (nccl-tests shifts the buffers per iteration): mid sizes "
               "may sit in L2 (50 MB on H100, 60 MB on H200)", lambda r: r.torch),
    Difference("each call goes through torch.distributed (13-22 us of CPU per call on an H200, nccl-tests 0.2-5 us): "
               "small-message latency is higher; -G removes it", lambda r: r.torch),
    Difference("in-place alltoall and sendrecv on gloo receive into scratch and copy back (timed); gloo cannot alias "
               "buffers", lambda r: r.torch and not r.on_gpu and r.cfg.collective in ("alltoall", "sendrecv")),
    Difference("-m on gloo: the calls go one after another (gloo has no group launch); on NCCL they are one ncclGroup",
               lambda r: r.torch and not r.on_gpu and r.cfg.agg_iters > 1),
    Difference("-z 1 and 2 with -m: each launch waits on its own, outside any group",
               lambda r: r.cfg.blocking in (1, 2) and r.cfg.agg_iters > 1),
)


def differences(cfg: BenchConfig, on_gpu: bool, path: CommPath) -> list[str]:
    """Where this run's output differs from nccl-tests': only what still differs on the path that ran."""
    run = Run(cfg, on_gpu, path)
    return [d.text.format(allocator_why=path.allocator_why) for d in DIFFERENCES if d.applies(run)]
