"""The shared benchmark driver (nccl-tests' common.cu): sizes, warm-up, timing, averaging across ranks, checking.

Runs inside an initialized torch.distributed process group, one call per rank. Rank 0 prints the nccl-tests
table through `emit` row by row as it is measured, so nothing measured is lost if a later size fails.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, Field, field_validator

from gpuval.collectives.catalog import Buffers, Context, collective_named, dtype_named, op_named
from gpuval.collectives.sizes import sweep
from gpuval.collectives.table import Row, Side, Table
from gpuval.errors import UsageError

AVERAGE_MODES = {0: "rank 0", 1: "average", 2: "minimum", 3: "maximum"}


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
    backend: str = "auto"
    timeout_s: float = Field(600.0, gt=0)

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
    """Times `iters` launches of a collective: CUDA events on GPU (optionally as one CUDA graph), a monotonic
    clock around blocking calls on CPU."""

    def __init__(self, torch: Any, on_gpu: bool, graph_launches: int) -> None:
        self.torch = torch
        self.on_gpu = on_gpu
        self.graph_launches = graph_launches

    def seconds_per_op(self, launch: Callable[[], None], iters: int, agg: int, warmup: int) -> float:
        torch = self.torch
        for _ in range(warmup):
            launch()
        total = iters * agg
        if not self.on_gpu:
            torch.distributed.barrier()
            start = time.perf_counter()
            for _ in range(total):
                launch()
            return (time.perf_counter() - start) / total
        torch.cuda.synchronize()
        torch.distributed.barrier()
        start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.graph_launches:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(total):
                    launch()
            torch.cuda.synchronize()
            start_evt.record()
            for _ in range(self.graph_launches):
                graph.replay()
            end_evt.record()
            total *= self.graph_launches
        else:
            start_evt.record()
            for _ in range(total):
                launch()
            end_evt.record()
        end_evt.synchronize()
        return start_evt.elapsed_time(end_evt) / 1000.0 / total


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


def _count_wrong(torch: Any, bufs: Buffers, checks: int, on_gpu: bool, device: Any) -> int:
    """Run the collective `checks` times on fresh data and count elements that differ from the exact result,
    summed over ranks."""
    wrong = 0
    for _ in range(checks):
        bufs.refill()
        bufs.launch()
        if on_gpu:
            torch.cuda.synchronize()
        if bufs.expected is not None:
            wrong += int((bufs.result != bufs.expected).sum().item())
    total = torch.tensor([wrong], dtype=torch.int64, device=device)
    torch.distributed.all_reduce(total)
    return int(total.item())


def run_sweep(cfg: BenchConfig, rank: int, nranks: int, device: Any, on_row: Callable[[Row], None],
              table: Table | None = None) -> Table:
    """Measure every size of the sweep on this rank into `table` (so a caller keeps the rows measured before a
    failure); `on_row` gets each finished row. Every rank calls this."""
    import torch

    coll = collective_named(cfg.collective)
    dtype = dtype_named(cfg.dtype)
    on_gpu = device.type == "cuda"
    if cfg.graph and not on_gpu:
        raise UsageError("-G (CUDA graph launches) needs GPUs; this run uses the CPU (gloo)")
    ctx = Context(rank=rank, nranks=nranks, dtype=dtype, op=cfg.op, root=cfg.root, device=device)
    timer = _Timer(torch, on_gpu, cfg.graph)
    table = table if table is not None else Table(collective=coll.name, nranks=nranks)
    for size in cfg.sizes():
        counts = coll.counts(size // dtype.size, nranks, dtype.size)
        sides: list[Side] = []
        for in_place in (False, True):
            bufs = coll.prepare(ctx, counts, in_place)
            seconds = timer.seconds_per_op(bufs.launch, cfg.iters, cfg.agg_iters, cfg.warmup)
            seconds = _combine_time(torch, seconds, cfg.average, device, nranks)
            algbw, busbw = coll.bandwidth(counts.param, dtype.size, seconds, nranks)
            nwrong = _count_wrong(torch, bufs, cfg.check, on_gpu, device) if cfg.check else None
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
