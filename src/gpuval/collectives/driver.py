"""The shared benchmark driver (nccl-tests' common.cu): sizes, warm-up, timing, averaging across ranks, checking.

Runs inside an initialized torch.distributed process group, one call per rank. Rank 0 prints the nccl-tests
table through `emit` row by row as it is measured, so nothing measured is lost if a later size fails.

What is the same as nccl-tests 2.19: counts, byte counts and busbw factors, -a, -G (iters x -m launches captured
once, replayed G times, time divided by G), -z 0-3, one untimed launch and a sync before every measurement,
thread-local graph capture, the check (new data per check launch, receive buffers reset, N/A for in-place
alltoall and sendrecv on NCCL, 2 ulp for float avg). What differs (DIFFERENCES, for the header and the docs):
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import BaseModel, Field, field_validator, model_validator

from gpuval.collectives.catalog import Buffers, Context, collective_named, dtype_named, op_named
from gpuval.collectives.patterns import TIMED_REP
from gpuval.collectives.sizes import sweep
from gpuval.collectives.table import Row, Side, Table
from gpuval.errors import UsageError

AVERAGE_MODES = {0: "rank 0", 1: "average", 2: "minimum", 3: "maximum"}
DIFFERENCES = (
    "warm-up: -w launches of each size just before it is timed (nccl-tests 2.19: -w launches of every size first, "
    "default 1; gpuval keeps the older default of 5)",
    "all_reduce, reduce, broadcast: torch.distributed has no out-of-place form, both columns time the in-place call",
    "no buffer offset rotation between iterations (nccl-tests shifts the buffers per iteration): mid sizes may sit "
    "in L2 (50 MB on H100)",
    "each call goes through torch (about 10-30 us of CPU per call): small-message latency is higher; -G removes it",
    "in-place alltoall and sendrecv on gloo receive into scratch and copy back (timed); gloo cannot alias buffers",
    "-m on gloo: the calls go one after another (gloo has no group launch); on NCCL they are one ncclGroup",
    "-z 1 and 2 with -m: each launch waits on its own, outside any group",
)


class BenchConfig(BaseModel):
    """What to measure; names and defaults are nccl-tests' (`-b 32M -e 32M -f 1 -i 1M -n 20 -w 5 -c 1 ...`)."""

    collective: str = "all_reduce"
    min_bytes: int = 32 * 1024**2
    max_bytes: int = 32 * 1024**2
    step_factor: int = 1
    step_bytes: int = 1024**2
    iters: int = Field(20, ge=1)
    warmup: int = Field(5, ge=0)
    agg_iters: int = Field(1, ge=1)
    check: int = Field(1, ge=0)
    op: str = "sum"
    dtype: str = "float"
    root: int = Field(0, ge=0)
    average: int = Field(1, ge=0, le=3)
    graph: int = Field(0, ge=0)
    blocking: int = Field(0, ge=0, le=3)  # -z: 0 none, 1 wait + barrier per launch, 2 wait per launch, 3 per iteration
    backend: str = "auto"
    timeout_s: float = Field(600.0, gt=0)
    cycles: int = Field(1, ge=1)  # -N: the whole sweep this many times, a row per size per cycle (one sample each)

    @field_validator("collective")
    @classmethod
    def _known_collective(cls, value: str) -> str:
        return collective_named(value).name

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        return dtype_named(value).name

    @field_validator("op")
    @classmethod
    def _known_op(cls, value: str) -> str:
        return op_named(value)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in ("auto", "nccl", "gloo"):
            raise ValueError(f"unknown backend {value!r}: use auto, nccl or gloo")
        return value

    @model_validator(mode="after")
    def _blocking_without_graphs(self) -> "BenchConfig":
        if self.blocking and self.graph:
            raise ValueError("-z (blocking) cannot be combined with -G (CUDA graph launches): a graph cannot wait "
                             "between the launches it holds")
        return self

    def sizes(self) -> list[int]:
        return sweep(self.min_bytes, self.max_bytes, self.step_factor, self.step_bytes)

    @property
    def program(self) -> str:
        """The nccl-tests binary this run stands in for."""
        return f"{self.collective}_perf"


@dataclass
class DeviceInfo:
    """One rank's device, as nccl-tests' "Using devices" lines show it."""

    rank: int
    pid: int
    hostname: str
    device: int
    device_hex: str
    device_info: str

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "group": 0, "pid": self.pid, "hostname": self.hostname, "device": self.device,
                "device_hex": self.device_hex, "device_info": self.device_info}


class _Timer:
    """Times `iters` outer iterations of a collective: CUDA events on GPU (optionally as one CUDA graph), a monotonic
    clock around blocking calls on CPU; -z 3 times each iteration by the host clock up to its completion, without
    the barrier that follows (as nccl-tests does)."""

    def __init__(self, torch: Any, on_gpu: bool, cfg: BenchConfig, device: Any) -> None:
        self.torch = torch
        self.on_gpu = on_gpu
        self.cfg = cfg
        self.device = device
        self.cpu_barrier = _cpu_barrier(torch) if on_gpu and cfg.blocking in (1, 3) else torch.distributed.barrier

    def _sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def _blocking(self, launch: Callable[[], None]) -> Callable[[], None]:
        """-z 1 / 2: each launch completes (and, for 1, all ranks meet) before the next starts."""
        def one() -> None:
            launch()
            self._sync()
            if self.cfg.blocking == 1:
                self.cpu_barrier()
        return one

    def iteration(self, bufs: Buffers) -> Callable[[], None]:
        """One outer iteration: -m launches, as one NCCL group on GPU (ncclGroupStart/End, as nccl-tests does)."""
        agg = self.cfg.agg_iters
        if self.cfg.blocking in (1, 2):
            one = self._blocking(bufs.launch)
            return one if agg == 1 else lambda: [one() for _ in range(agg)]  # type: ignore[func-returns-value]
        if agg == 1:
            return bufs.launch
        manager = getattr(self.torch.distributed, "_coalescing_manager", None)
        if not self.on_gpu or manager is None:  # gloo has no group launch: the -m calls go one after another
            return lambda: [bufs.launch() for _ in range(agg)]  # type: ignore[func-returns-value]
        issue = bufs.issue or bufs.launch

        def grouped() -> None:
            with manager(device=self.device):
                for _ in range(agg):
                    issue()
        return grouped

    def seconds_per_op(self, bufs: Buffers) -> float:
        """Seconds per collective: warm-up, one untimed launch and a sync (always, whatever -w says: NCCL sets up
        connections lazily, and never inside the timed loop or a graph capture), then the timed iterations."""
        torch, cfg = self.torch, self.cfg
        step = self.iteration(bufs)
        for _ in range(cfg.warmup):
            bufs.launch()
        bufs.launch()
        self._sync()
        torch.distributed.barrier()
        total = cfg.iters * cfg.agg_iters
        if cfg.blocking == 3:
            return self._host_per_iteration(step) / total
        if not self.on_gpu:
            start = time.perf_counter()
            for _ in range(cfg.iters):
                step()
            return (time.perf_counter() - start) / total
        return self._events(step) / total

    def _host_per_iteration(self, step: Callable[[], None]) -> float:
        """-z 3: each outer iteration waited for, then a barrier that is not timed."""
        spent = 0.0
        for _ in range(self.cfg.iters):
            start = time.perf_counter()
            step()
            self._sync()
            spent += time.perf_counter() - start
            self.cpu_barrier()
        return spent

    def _events(self, step: Callable[[], None]) -> float:
        torch, graphs = self.torch, self.cfg.graph
        start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if graphs:
            graph = torch.cuda.CUDAGraph()
            # thread-local capture, as nccl-tests: NCCL may cudaMalloc while connecting, illegal under global capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(self.cfg.iters):
                    step()
            torch.cuda.synchronize()
            torch.distributed.barrier()
            start_evt.record()
            for _ in range(graphs):
                graph.replay()
        else:
            start_evt.record()
            for _ in range(self.cfg.iters):
                step()
        end_evt.record()
        end_evt.synchronize()
        return start_evt.elapsed_time(end_evt) / 1000.0 / max(graphs, 1)


def _cpu_barrier(torch: Any) -> Callable[[], None]:
    """A barrier that puts nothing on the GPU stream (nccl-tests' MPI barrier): a gloo group beside NCCL's, or the
    default barrier where gloo cannot be had."""
    dist = torch.distributed
    try:
        group = dist.new_group(backend="gloo")
    except (RuntimeError, ValueError):
        return dist.barrier
    return lambda: dist.barrier(group=group)


def _combine_time(torch: Any, seconds: float, mode: int, device: Any, nranks: int) -> float:
    """nccl-tests' -a: the time of rank 0, or the average, minimum or maximum over ranks."""
    dist = torch.distributed
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    if mode == 0:
        dist.broadcast(value, src=0)
    else:
        op = {1: dist.ReduceOp.SUM, 2: dist.ReduceOp.MIN, 3: dist.ReduceOp.MAX}[mode]
        dist.all_reduce(value, op=op)
        if mode == 1:
            value /= nranks
    return float(value.item())


def _count_wrong(torch: Any, bufs: Buffers, checks: int, on_gpu: bool, device: Any, reps: Iterator[int]) -> int | None:
    """Run the collective `checks` times, each on the inputs of a new repetition with receive buffers reset to the
    sentinel, and count the elements that differ from the expected result, summed over ranks; None (N/A) where the
    result cannot be checked (in-place alltoall and sendrecv on NCCL)."""
    if not bufs.checkable:
        return None
    wrong = torch.zeros((), dtype=torch.int64, device=device)
    for _ in range(checks):
        rep = next(reps)
        bufs.refill(rep)
        bufs.launch()
        if on_gpu:
            torch.cuda.synchronize()
        wrong += bufs.wrong(rep)
    total = wrong.reshape(1)
    torch.distributed.all_reduce(total)
    return int(total.item())


def run_sweep(cfg: BenchConfig, rank: int, nranks: int, device: Any, on_row: Callable[[Row], None],
              table: Table | None = None) -> Table:
    """Measure every size of the sweep on this rank into `table` (so a caller keeps the rows measured before a
    failure); `on_row` gets each finished row. Every rank calls this. With -N cycles the sweep runs `cycles`
    times and each cycle adds its own row per size, as nccl-tests prints them: one sample per cycle."""
    import torch

    coll = collective_named(cfg.collective)
    dtype = dtype_named(cfg.dtype)
    on_gpu = device.type == "cuda"
    if cfg.graph and not on_gpu:
        raise UsageError("-G (CUDA graph launches) needs GPUs; this run uses the CPU (gloo)")
    ctx = Context(rank=rank, nranks=nranks, dtype=dtype, op=cfg.op, root=cfg.root, device=device)
    timer = _Timer(torch, on_gpu, cfg, device)
    reps = itertools.count(TIMED_REP + 1)
    table = table if table is not None else Table(collective=coll.name, nranks=nranks)
    for size in [size for _ in range(cfg.cycles) for size in cfg.sizes()]:  # -N: every size once per cycle
        counts = coll.counts(size // dtype.size, nranks, dtype.size)
        sides: list[Side] = []
        for in_place in (False, True):
            bufs = coll.prepare(ctx, counts, in_place)
            seconds = timer.seconds_per_op(bufs)
            seconds = _combine_time(torch, seconds, cfg.average, device, nranks)
            algbw, busbw = coll.bandwidth(counts.param, dtype.size, seconds, nranks)
            nwrong = _count_wrong(torch, bufs, cfg.check, on_gpu, device, reps) if cfg.check else None
            sides.append(Side(time=seconds * 1e6, alg_bw=algbw, bus_bw=busbw, nwrong=nwrong))
            del bufs
        row = Row(
            size=max(counts.send, counts.recv) * dtype.size,
            count=counts.param,
            type=dtype.name,
            redop=coll.redop_label(cfg.op),
            root=coll.root_label(cfg.root),
            out_of_place=sides[0],
            in_place=sides[1],
        )
        table.rows.append(row)
        on_row(row)
    table.out_of_bounds = table.total_wrong()
    table.avg_busbw = table.average_busbw()
    return table
