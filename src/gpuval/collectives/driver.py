"""The shared benchmark driver (nccl-tests' common.cu): sizes, warm-up, timing, averaging across ranks, checking.

Runs inside an initialized torch.distributed process group, one call per rank. Rank 0 prints the nccl-tests
table through `emit` row by row as it is measured, so nothing measured is lost if a later size fails.

The collectives go through one of two paths (direct.CommPath): on GPU ranks NCCL itself, called through nccl4py's
bindings with nccl-tests' buffers, offsets and groups (direct.py), the process group then being gloo's (barriers
and -a on the host, the NCCL communicator under test the only one); on CPU ranks, or where nccl4py cannot load,
torch.distributed (torch_path.py). Each collective's fill, check and calls are its own (catalog.py).

What is the same as nccl-tests 2.19: counts, byte counts and busbw factors, -a, -G (iters x -m launches captured
once, replayed G times, time divided by G), -z 0-3, one untimed launch and a sync before every measurement,
thread-local graph capture, the check (new data per check launch, receive buffers reset, N/A for in-place
alltoall and sendrecv on NCCL, 2 ulp for float avg), and on the nccl4py path the buffers (ncclMemAlloc) and the
rotation. What differs: differences.py, whose notes the header prints.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from gpuval.collectives.catalog import collective_named, dtype_named, op_named
from gpuval.collectives.direct import CommPath, DirectRunner, Memory, choose_path, open_comm
from gpuval.collectives.patterns import TIMED_REP
from gpuval.collectives.shapes import Buffers, Collective, Context
from gpuval.collectives.sizes import sweep
from gpuval.collectives.table import Row, Side, Table
from gpuval.collectives.torch_path import TorchRunner
from gpuval.errors import UsageError

_CHOICES = {"backend": ("backend", ("auto", "nccl", "gloo")), "via": ("path", ("auto", "nccl4py", "torch"))}


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
    via: str = "auto"  # auto: NCCL through nccl4py on GPU ranks where it loads, else torch.distributed

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

    @field_validator("backend", "via")
    @classmethod
    def _known_choice(cls, value: str, info: ValidationInfo) -> str:
        what, choices = _CHOICES[info.field_name]
        if value not in choices:
            raise ValueError(f"unknown {what} {value!r}: use {', '.join(choices[:-1])} or {choices[-1]}")
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
    """One rank's device, as nccl-tests' "Using devices" lines show it, and how the rank was placed beside its GPU
    (`placed`; None on a CPU rank), which nccl-tests' lines do not show."""

    rank: int
    pid: int
    hostname: str
    device: int
    device_hex: str
    device_info: str
    placed: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "group": 0, "pid": self.pid, "hostname": self.hostname, "device": self.device,
                "device_hex": self.device_hex, "device_info": self.device_info}


class _Timer:
    """Times `iters` outer iterations of a collective: CUDA events on GPU (optionally as one CUDA graph), a monotonic
    clock around blocking calls on CPU; -z 3 times each iteration by the host clock up to its completion, without
    the barrier that follows (as nccl-tests does)."""

    def __init__(self, torch: Any, on_gpu: bool, cfg: BenchConfig, device: Any, stream: Any = None) -> None:
        self.torch = torch
        self.on_gpu = on_gpu
        self.cfg = cfg
        self.device = device
        self.stream = stream  # the direct path's stream: graphs are captured on it
        self.cpu_barrier = _cpu_barrier(torch) if on_gpu and cfg.blocking in (1, 3) else torch.distributed.barrier

    def _sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def _blocking(self, launch: Callable[[int], None]) -> Callable[[int], None]:
        """-z 1 / 2: each launch completes (and, for 1, all ranks meet) before the next starts."""
        def one(i: int) -> None:
            launch(i)
            self._sync()
            if self.cfg.blocking == 1:
                self.cpu_barrier()
        return one

    def iteration(self, bufs: Buffers) -> Callable[[int], None]:
        """Outer iteration `it`: -m launches it*m .. it*m+m-1 (nccl-tests' launch index), as one NCCL group on GPU
        (ncclGroupStart/End, as nccl-tests does; torch's coalescing manager on the torch path)."""
        agg = self.cfg.agg_iters
        if self.cfg.blocking in (1, 2):
            one = self._blocking(bufs.launch)
            return one if agg == 1 else lambda it: [one(it * agg + a) for a in range(agg)]  # type: ignore[func-returns-value]
        if agg == 1:
            return bufs.launch
        torch_group = getattr(self.torch.distributed, "_coalescing_manager", None)
        if bufs.group is None and (not self.on_gpu or torch_group is None):  # gloo: the -m calls one after another
            return lambda it: [bufs.launch(it * agg + a) for a in range(agg)]  # type: ignore[func-returns-value]
        issue = bufs.issue or bufs.launch
        group = bufs.group or (lambda: torch_group(device=self.device))

        def grouped(it: int) -> None:
            with group():
                for a in range(agg):
                    issue(it * agg + a)
        return grouped

    def seconds_per_op(self, bufs: Buffers) -> float:
        """Seconds per collective: warm-up, one untimed launch and a sync (always, whatever -w says: NCCL sets up
        connections lazily, and never inside the timed loop or a graph capture), then the timed iterations."""
        torch, cfg = self.torch, self.cfg
        step = self.iteration(bufs)
        for i in range(cfg.warmup):
            bufs.launch(i)
        bufs.launch(0)
        self._sync()
        torch.distributed.barrier()
        total = cfg.iters * cfg.agg_iters
        if cfg.blocking == 3:
            return self._host_per_iteration(step) / total
        if not self.on_gpu:
            start = time.perf_counter()
            for it in range(cfg.iters):
                step(it)
            return (time.perf_counter() - start) / total
        return self._events(step) / total

    def _host_per_iteration(self, step: Callable[[int], None]) -> float:
        """-z 3: each outer iteration waited for, then a barrier that is not timed."""
        spent = 0.0
        for it in range(self.cfg.iters):
            start = time.perf_counter()
            step(it)
            self._sync()
            spent += time.perf_counter() - start
            self.cpu_barrier()
        return spent

    def _events(self, step: Callable[[int], None]) -> float:
        torch, graphs = self.torch, self.cfg.graph
        start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if graphs:
            graph = torch.cuda.CUDAGraph()
            # on the direct path's stream: its NCCL calls are made on that stream, so that is what must be captured
            on = {"stream": self.stream} if self.stream is not None else {}
            # thread-local capture, as nccl-tests: NCCL may cudaMalloc while connecting, illegal under global capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local", **on):
                for it in range(self.cfg.iters):
                    step(it)
            torch.cuda.synchronize()
            torch.distributed.barrier()
            start_evt.record()
            for _ in range(graphs):
                graph.replay()
        else:
            start_evt.record()
            for it in range(self.cfg.iters):
                step(it)
        end_evt.record()
        end_evt.synchronize()
        return start_evt.elapsed_time(end_evt) / 1000.0 / max(graphs, 1)


def _on_host(torch: Any) -> bool:
    """The process group works on the host (gloo: the nccl4py path's, and CPU ranks'), not on the GPU stream."""
    return torch.distributed.get_backend() == "gloo"


def _cpu_barrier(torch: Any) -> Callable[[], None]:
    """A barrier that puts nothing on the GPU stream (nccl-tests' MPI barrier): the process group's own where it is
    gloo, else a gloo group beside NCCL's, or the default barrier where gloo cannot be had."""
    dist = torch.distributed
    if _on_host(torch):
        return dist.barrier
    try:
        group = dist.new_group(backend="gloo")
    except (RuntimeError, ValueError):
        return dist.barrier
    return lambda: dist.barrier(group=group)


def _combine_time(torch: Any, seconds: float, mode: int, device: Any, nranks: int) -> float:
    """nccl-tests' -a: the time of rank 0, or the average, minimum or maximum over ranks (on the host where the
    process group is gloo's)."""
    dist = torch.distributed
    value = torch.tensor([seconds], dtype=torch.float64, device="cpu" if _on_host(torch) else device)
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
        bufs.launch(0)
        if on_gpu:
            torch.cuda.synchronize()
        wrong += bufs.wrong(rep)
    total = wrong.reshape(1).to("cpu" if _on_host(torch) else device)
    torch.distributed.all_reduce(total)
    return int(total.item())


@contextlib.contextmanager
def _preparer(torch: Any, ctx: Context, path: CommPath, max_bytes: int) -> Iterator[tuple[Callable[..., Any], Any]]:
    """(prepare(collective, counts, in_place) -> Buffers or None for a side the path does not have, the direct
    path's stream or None). The direct path opens its communicator and -e-sized buffers for the whole sweep and
    makes its stream the current one, so fills, checks, events and graph capture share it with NCCL."""
    if path.bindings is None:
        yield TorchRunner(ctx).prepare, None
        return
    on_gpu = ctx.device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(ctx.device)
    comm = open_comm(path, torch.distributed.distributed_c10d._get_default_store(), ctx.rank, ctx.nranks)
    ok = False
    try:
        stream = torch.cuda.Stream(device=ctx.device) if on_gpu else None
        runner = DirectRunner(comm, Memory.allocate(path, torch, max_bytes, ctx.device), ctx,
                              stream.cuda_stream if stream is not None else 0)
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            yield runner.prepare, stream
        if on_gpu:
            torch.cuda.synchronize()
        ok = True
    finally:
        comm.close(ok)


def _side(torch: Any, cfg: BenchConfig, coll: Collective, bufs: Buffers, timer: _Timer, reps: Iterator[int],
          ctx: Context, param_count: int) -> Side:
    """One measured side of a row: timed, combined over ranks (-a), checked (-c)."""
    seconds = _combine_time(torch, timer.seconds_per_op(bufs), cfg.average, ctx.device, ctx.nranks)
    algbw, busbw = coll.bandwidth(param_count, ctx.dtype.size, seconds, ctx.nranks)
    nwrong = (_count_wrong(torch, bufs, cfg.check, ctx.device.type == "cuda", ctx.device, reps)
              if cfg.check else None)
    return Side(time=seconds * 1e6, alg_bw=algbw, bus_bw=busbw, nwrong=nwrong)


def run_sweep(cfg: BenchConfig, rank: int, nranks: int, device: Any, on_row: Callable[[Row], None],
              table: Table | None = None, path: CommPath | None = None) -> Table:
    """Measure every size of the sweep on this rank into `table` (so a caller keeps the rows measured before a
    failure); `on_row` gets each finished row. Every rank calls this. With -N cycles the sweep runs `cycles`
    times and each cycle adds its own row per size, as nccl-tests prints them: one sample per cycle. `path`: what
    drives the collectives (default: choose_path for --via); a side the path does not have is None (N/A)."""
    import torch

    coll = collective_named(cfg.collective)
    dtype = dtype_named(cfg.dtype)
    on_gpu = device.type == "cuda"
    if cfg.graph and not on_gpu:
        raise UsageError("-G (CUDA graph launches) needs GPUs; this run uses the CPU (gloo)")
    path = path or choose_path(cfg.via, on_gpu)
    ctx = Context(rank=rank, nranks=nranks, dtype=dtype, op=cfg.op, root=cfg.root, device=device)
    reps = itertools.count(TIMED_REP + 1)
    table = table if table is not None else Table(collective=coll.name, nranks=nranks)
    with _preparer(torch, ctx, path, cfg.max_bytes) as (prepare, stream):
        timer = _Timer(torch, on_gpu, cfg, device, stream)
        for size in [size for _ in range(cfg.cycles) for size in cfg.sizes()]:  # -N: every size once per cycle
            counts = coll.counts(size // dtype.size, nranks, dtype.size)
            sides: list[Side | None] = []
            for in_place in (False, True):
                bufs = prepare(coll, counts, in_place)
                sides.append(None if bufs is None else _side(torch, cfg, coll, bufs, timer, reps, ctx, counts.param))
                del bufs
            row = Row(size=max(counts.send, counts.recv) * dtype.size, count=counts.param, type=dtype.name,
                      redop=coll.redop_label(cfg.op), root=coll.root_label(cfg.root), out_of_place=sides[0],
                      in_place=sides[1])
            table.rows.append(row)
            on_row(row)
    table.out_of_bounds = table.total_wrong()
    table.avg_busbw = table.average_busbw()
    return table
