"""The collectives, one small class each, in the shape of nccl-tests' src/<collective>.cu.

Each class says how many elements its buffers hold for a message size (nccl-tests' getCollByteCount),
its bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md), and how to fill, run and check it with
torch.distributed. torch is imported only inside the methods that need it.

Exact checking: every rank's data is a short integer pattern repeated along the buffer, chosen per dtype
and op so that the result is exactly representable; the expected result is computed from the same pattern.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

from gpuval.errors import UsageError

PERIOD = 16  # length of the repeated data pattern


@dataclass(frozen=True)
class DType:
    """A data type by its nccl-tests name; `exact` is the largest integer it holds exactly."""

    name: str
    torch_name: str
    size: int
    exact: int


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("int8", "int8", 1, 127),
        DType("uint8", "uint8", 1, 255),
        DType("int32", "int32", 4, 2**31 - 1),
        DType("int64", "int64", 8, 2**63 - 1),
        DType("half", "float16", 2, 2**11),
        DType("float", "float32", 4, 2**24),
        DType("double", "float64", 8, 2**53),
        DType("bfloat16", "bfloat16", 2, 2**8),
    )
}
_DTYPE_ALIASES = {
    "char": "int8", "int": "int32", "float16": "half", "fp16": "half", "float32": "float", "fp32": "float",
    "float64": "double", "fp64": "double", "bf16": "bfloat16", "uint8_t": "uint8",
}
OPS = ("sum", "prod", "min", "max", "avg")


def dtype_named(name: str) -> DType:
    """nccl-tests' -d value (or a common alias) as a DType."""
    key = _DTYPE_ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise UsageError(f"unknown data type {name!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def op_named(name: str) -> str:
    """nccl-tests' -o value, checked."""
    if name.lower() not in OPS:
        raise UsageError(f"unknown reduction {name!r}: use one of {', '.join(OPS)}")
    return name.lower()


def per_rank_count(count: int, nranks: int, typesize: int) -> int:
    """Each rank's share of `count` elements, aligned down to 16 bytes: nccl-tests' `(count/nranks) &
    -(16/eltSize)` for all_gather, reduce_scatter and alltoall."""
    align = max(16 // typesize, 1)
    return (count // nranks) // align * align


@dataclass(frozen=True)
class Counts:
    """Elements in the send and receive buffers, and the count nccl-tests prints."""

    send: int
    recv: int
    param: int


@dataclass
class Context:
    """What a rank needs to fill and run a collective."""

    rank: int
    nranks: int
    dtype: DType
    op: str
    root: int
    device: Any  # torch.device


@dataclass
class Buffers:
    """One prepared collective: `launch` runs it once; `result` is compared with `expected` (None: unchecked)."""

    launch: Callable[[], None]
    result: Any
    expected: Any | None
    refill: Callable[[], None]


class Collective(ABC):
    """Base shape; subclasses set the class attributes and fill in `counts` and `prepare`."""

    name: str = ""
    reduces = False  # takes -o
    rooted = False  # takes -r
    gathers = False  # bytes counted = count x typesize x nranks
    bus_numerator = 1  # busbw factor = numerator * (n-1)/n when `scaled`, else 1
    scaled = False

    def counts(self, count: int, nranks: int, typesize: int) -> Counts:
        """Buffer sizes for `count` elements on `nranks` ranks (nccl-tests' getCollByteCount)."""
        return Counts(count, count, count)

    def bus_factor(self, nranks: int) -> float:
        """busbw / algbw for this collective on n ranks."""
        if not self.scaled or nranks < 1:
            return 1.0
        return self.bus_numerator * (nranks - 1) / nranks

    def bandwidth(self, param_count: int, typesize: int, seconds: float, nranks: int) -> tuple[float, float]:
        """(algbw, busbw) in GB/s for one operation that took `seconds`."""
        if seconds <= 0:
            return 0.0, 0.0
        nbytes = param_count * typesize * (nranks if self.gathers else 1)
        algbw = nbytes / 1.0e9 / seconds
        return algbw, algbw * self.bus_factor(nranks)

    def redop_label(self, op: str) -> str:
        return op if self.reduces else "none"

    def root_label(self, root: int) -> int:
        return root if self.rooted else -1

    @abstractmethod
    def prepare(self, ctx: Context, counts: Counts, in_place: bool) -> Buffers:
        """Allocate and fill buffers for one size, and the closure that runs the collective once."""


# ---- data patterns ------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _reduce_op(op: str):
    dist = _torch().distributed
    return {
        "sum": dist.ReduceOp.SUM,
        "prod": dist.ReduceOp.PRODUCT,
        "min": dist.ReduceOp.MIN,
        "max": dist.ReduceOp.MAX,
        "avg": dist.ReduceOp.AVG,
    }[op]


def _reduction(ctx: Context) -> tuple[Any, Callable[[Any], None]]:
    """The op to hand torch, and what to do to the reduced result afterwards. gloo has no AVG for integer types:
    there AVG is SUM followed by a truncating division (NCCL's integer AVG), timed with the collective."""
    integer = ctx.dtype.name.startswith(("int", "uint"))
    if ctx.op == "avg" and integer and ctx.device.type != "cuda":
        return _reduce_op("sum"), lambda t: t.div_(ctx.nranks, rounding_mode="trunc")
    return _reduce_op(ctx.op), lambda t: None


def _average_pattern(torch: Any, ranks: Any, cols: Any, nranks: int, dtype: DType) -> Any:
    """Values whose average is exact: v + d_r with v >= 1 the same on every rank and offsets d_0 = +1, d_1 = -1
    (0 elsewhere), so the sum is n*v and the average v, while ranks 0 and 1 hold data that differs from it: a
    collective that does nothing is caught. v stays small enough that n*(v+1) is exact in the type."""
    top = dtype.exact // nranks - 1  # largest v with n*(v+1) exact
    if top < 1 or nranks < 2:  # too many ranks for this type (bfloat16 past 128 ranks): zeros, still exact
        return torch.zeros(nranks, PERIOD, dtype=torch.int64)
    base = 1 + cols % min(top, 7)
    offset = (ranks == 0).to(torch.int64) - (ranks == 1).to(torch.int64)
    return base + offset


def reduction_pattern(nranks: int, dtype: DType, op: str):
    """(per-rank pattern [n, PERIOD], expected [PERIOD]) as int64, exact in `dtype` for `op`."""
    torch = _torch()
    ranks = torch.arange(nranks, dtype=torch.int64).unsqueeze(1)
    cols = torch.arange(PERIOD, dtype=torch.int64).unsqueeze(0)
    one_hot = (ranks == cols % min(nranks, PERIOD)).to(torch.int64)
    if op == "avg":
        pattern = _average_pattern(torch, ranks, cols, nranks, dtype)
    elif op == "sum":
        modulus = min(8, dtype.exact // nranks + 1)
        pattern = (ranks + cols) % modulus if modulus >= 2 else one_hot
    elif op == "prod":
        pattern = one_hot + 1  # one rank holds 2, the others 1: product 2
    else:
        pattern = (cols + 7 * ranks) % min(100, dtype.exact)
    expected = {
        "sum": lambda p: p.sum(0),
        "avg": lambda p: p.sum(0) // nranks,
        "prod": lambda p: p.prod(0),
        "min": lambda p: p.min(0).values,
        "max": lambda p: p.max(0).values,
    }[op](pattern)
    return pattern, expected


def data_pattern(rank: int, chunk: int = 0):
    """A rank's (and destination chunk's) pattern for data-movement collectives: values below 97."""
    torch = _torch()
    return (torch.arange(PERIOD, dtype=torch.int64) + 3 * rank + 5 * chunk) % 97


SENTINEL = 99  # what a receive buffer holds before the collective; no pattern value equals it


def fill(values, length: int, ctx: Context, offset: int = 0):
    """`values` (int64, one period) repeated to `length` elements of ctx.dtype on ctx.device, from `offset`."""
    torch = _torch()
    tdtype = getattr(torch, ctx.dtype.torch_name)
    period = values.to(device=ctx.device, dtype=tdtype).roll(-(offset % PERIOD))
    reps = math.ceil(length / PERIOD) if length else 0
    return period.repeat(reps)[:length].contiguous()


def _can_alias(ctx: Context) -> bool:
    """NCCL sends and receives through one buffer, as nccl-tests' in-place alltoall and sendrecv do; gloo cannot,
    so there in-place receives into scratch and copies back (the copy is timed)."""
    return ctx.device.type == "cuda"


def empty(length: int, ctx: Context):
    torch = _torch()
    return torch.full((length,), SENTINEL, dtype=getattr(torch, ctx.dtype.torch_name), device=ctx.device)


# ---- the collectives --------------------------------------------------------------------------------------


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    scaled = True
    bus_numerator = 2

    def _reduce(self, dist: Any, buf: Any, op: Any, ctx: Context) -> bool:
        """Run the reduction; True where this rank holds the result."""
        dist.all_reduce(buf, op=op)
        return True

    def prepare(self, ctx, counts, in_place):
        dist = _torch().distributed
        pattern, table = reduction_pattern(ctx.nranks, ctx.dtype, ctx.op)
        op, after = _reduction(ctx)
        # torch.distributed reduces in place only: both columns time that call, each on a buffer of its own filled
        # outside the timed loop (the traffic is that of NCCL's out-of-place call; no copy is timed).
        buf = fill(pattern[ctx.rank], counts.recv, ctx)
        holds_result = not self.rooted or ctx.rank == ctx.root

        def launch():
            if self._reduce(dist, buf, op, ctx):
                after(buf)

        def refill():
            buf.copy_(fill(pattern[ctx.rank], counts.recv, ctx))

        return Buffers(launch, buf, fill(table, counts.recv, ctx) if holds_result else None, refill)


class Reduce(AllReduce):
    name = "reduce"
    rooted = True
    scaled = False

    def _reduce(self, dist, buf, op, ctx):
        dist.reduce(buf, dst=ctx.root, op=op)
        return ctx.rank == ctx.root


class Broadcast(Collective):
    name = "broadcast"
    rooted = True

    def prepare(self, ctx, counts, in_place):
        dist = _torch().distributed
        source = data_pattern(ctx.root)

        def initial():
            return fill(source, counts.recv, ctx) if ctx.rank == ctx.root else empty(counts.recv, ctx)

        buf = initial()
        return Buffers(
            lambda: dist.broadcast(buf, src=ctx.root), buf, fill(source, counts.recv, ctx), lambda: buf.copy_(initial())
        )


class AllGather(Collective):
    name = "all_gather"
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per, per * nranks, per)

    def prepare(self, ctx, counts, in_place):
        torch = _torch()
        dist = torch.distributed
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        per = counts.param
        recv = empty(counts.recv, ctx)
        send = recv[ctx.rank * per : (ctx.rank + 1) * per] if in_place else empty(per, ctx)

        def refill():
            recv.fill_(SENTINEL)
            send.copy_(fill(data_pattern(ctx.rank), per, ctx))

        refill()
        expected = torch.cat([fill(data_pattern(r), per, ctx) for r in range(ctx.nranks)])
        return Buffers(lambda: gather(recv, send), recv, expected, refill)


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per, per)

    def prepare(self, ctx, counts, in_place):
        dist = _torch().distributed
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        pattern, table = reduction_pattern(ctx.nranks, ctx.dtype, ctx.op)
        op, after = _reduction(ctx)
        per = counts.param
        send = fill(pattern[ctx.rank], counts.send, ctx)
        recv = send[ctx.rank * per : (ctx.rank + 1) * per] if in_place else empty(per, ctx)
        expected = fill(table, per, ctx, offset=ctx.rank * per)

        def launch():
            scatter(recv, send, op=op)
            after(recv)

        def refill():
            send.copy_(fill(pattern[ctx.rank], counts.send, ctx))

        return Buffers(launch, recv, expected, refill)


class AllToAll(Collective):
    name = "alltoall"
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per * nranks, per)

    def prepare(self, ctx, counts, in_place):
        torch = _torch()
        dist = torch.distributed
        per, n = counts.param, ctx.nranks

        def outgoing():
            return torch.cat([fill(data_pattern(ctx.rank, dest), per, ctx) for dest in range(n)])

        send = outgoing()
        expected = torch.cat([fill(data_pattern(src, ctx.rank), per, ctx) for src in range(n)])
        if in_place and not _can_alias(ctx):
            scratch = empty(counts.recv, ctx)

            def launch():
                dist.all_to_all_single(scratch, send)
                send.copy_(scratch)

            return Buffers(launch, send, expected, lambda: send.copy_(outgoing()))
        recv = send if in_place else empty(counts.recv, ctx)
        return Buffers(lambda: dist.all_to_all_single(recv, send), recv, expected, lambda: send.copy_(outgoing()))


class SendRecv(Collective):
    name = "sendrecv"

    def redop_label(self, op):
        return "sum"  # nccl-tests prints the default op for sendrecv

    def prepare(self, ctx, counts, in_place):
        dist = _torch().distributed
        n, rank = ctx.nranks, ctx.rank
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n
        send = fill(data_pattern(rank), counts.send, ctx)
        scratch = in_place and not _can_alias(ctx)
        recv = empty(counts.recv, ctx) if scratch or not in_place else send

        def launch():
            ops = [dist.P2POp(dist.isend, send, peer_to), dist.P2POp(dist.irecv, recv, peer_from)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if scratch:
                send.copy_(recv)

        def refill():
            send.copy_(fill(data_pattern(rank), counts.send, ctx))

        return Buffers(launch, send if in_place else recv, fill(data_pattern(peer_from), counts.recv, ctx), refill)


COLLECTIVES: dict[str, Collective] = {
    c.name: c for c in (AllReduce(), AllGather(), ReduceScatter(), AllToAll(), Broadcast(), Reduce(), SendRecv())
}
_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "all_to_all": "alltoall", "send_recv": "sendrecv"}


def collective_named(name: str) -> Collective:
    """A collective by nccl-tests name (all_reduce, all_reduce_perf, allreduce ...)."""
    key = name.lower().removesuffix("_perf")
    key = _ALIASES.get(key, key)
    if key not in COLLECTIVES:
        raise UsageError(f"unknown collective {name!r}: use one of {', '.join(COLLECTIVES)}")
    return COLLECTIVES[key]
