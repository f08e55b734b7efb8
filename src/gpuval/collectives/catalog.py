"""The collectives, one small class each, in the shape of nccl-tests' src/<collective>.cu.

Each class says how many elements its buffers hold for a message size (nccl-tests' getCollByteCount),
its bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md), and how to fill, run and check it with
torch.distributed. torch is imported only inside the methods that need it.

Checking (`-c`): the data comes from gpuval.collectives.patterns (per element index, rank and repetition, exact in
the type); every check launch starts from fresh inputs of a new repetition and receive buffers holding the
sentinel. In-place alltoall and sendrecv on NCCL send and receive through one buffer, which races (nccl-tests
reports "N/A" for them): they are timed, not checked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

from gpuval.collectives.patterns import (  # noqa: F401  (DTYPES, OPS and the lookups are part of this API)
    DTYPES, OPS, TIMED_REP, chunks, dtype_named, op_named, torch_module,
)
from gpuval.collectives.shapes import Buffers, Context, Counts, per_rank_count  # noqa: F401  (part of this API)
from gpuval.errors import UsageError


class Collective(ABC):
    """Base shape; subclasses set the class attributes and fill in `counts` and `prepare`."""

    name: str = ""
    reduces = False  # takes -o
    rooted = False  # takes -r
    gathers = False  # bytes counted = count x typesize x nranks
    bus_numerator = 1  # busbw factor = numerator * (n-1)/n when `scaled`, else 1
    scaled = False
    in_place_only = False  # torch.distributed has only the in-place call: out-of-place is N/A on NCCL through torch

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

    def torch_side(self, ctx: Context, in_place: bool) -> bool:
        """Whether torch.distributed has this side: on NCCL, all_reduce, reduce and broadcast have no out-of-place
        call (N/A, never the in-place call timed twice); gloo builds it as a copy then the in-place call."""
        return in_place or not self.in_place_only or ctx.device.type != "cuda"

    def root_label(self, root: int) -> int:
        return root if self.rooted else -1

    @abstractmethod
    def prepare(self, ctx: Context, counts: Counts, in_place: bool) -> Buffers:
        """Allocate and fill buffers for one size, and the closure that runs the collective once."""


def _reduction(ctx: Context) -> tuple[Any, Callable[[Any], None]]:
    """torch's ReduceOp, and what to do to the reduced result afterwards. gloo has no AVG for integer types:
    there AVG is SUM followed by a truncating division (NCCL's integer AVG), timed with the collective."""
    ops = torch_module().distributed.ReduceOp
    if ctx.op == "avg" and ctx.dtype.name.startswith(("int", "uint")) and ctx.device.type != "cuda":
        return ops.SUM, lambda t: t.div_(ctx.nranks, rounding_mode="trunc")
    return getattr(ops, "PRODUCT" if ctx.op == "prod" else ctx.op.upper()), lambda t: None


def _can_alias(ctx: Context) -> bool:
    """NCCL sends and receives through one buffer, as nccl-tests' in-place alltoall and sendrecv do (a race, which
    is why neither checks it); gloo cannot, so there in-place receives into scratch and copies back (the copy is
    timed) and the result is checked."""
    return ctx.device.type == "cuda"


# ---- the collectives --------------------------------------------------------------------------------------


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    scaled = True
    bus_numerator = 2
    in_place_only = True  # torch.distributed has no out-of-place form

    def _reduce(self, dist: Any, buf: Any, op: Any, ctx: Context) -> bool:
        """Run the reduction; True where this rank holds the result."""
        dist.all_reduce(buf, op=op)
        return True

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        pat = ctx.patterns
        op, after = _reduction(ctx)
        # torch.distributed reduces in place only. Out-of-place (gloo): the send buffer is copied into the receive
        # buffer, which is then reduced in place; the copy is timed with the call (on NCCL: no such column, N/A).
        buf = pat.empty(counts.recv)
        send = buf if in_place else pat.empty(counts.send)
        holds_result = not self.rooted or ctx.rank == ctx.root

        def launch(_i: int = 0):
            if send is not buf:
                buf.copy_(send)
            if self._reduce(dist, buf, op, ctx):
                after(buf)

        def refill(rep):
            if send is not buf:
                pat.reset(buf)
            pat.fill_input(send, 0, ctx.rank, rep)

        refill(TIMED_REP)
        return Buffers(launch, buf, refill, lambda rep: pat.reduced_wrong(buf, 0, rep) if holds_result else 0)


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
    in_place_only = True

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        buf = ctx.patterns.empty(counts.recv)
        # out-of-place (gloo): the root copies its send buffer into the receive buffer it broadcasts, timed
        send = buf if in_place or ctx.rank != ctx.root else ctx.patterns.empty(counts.send)

        def launch(_i: int = 0):
            if send is not buf:
                buf.copy_(send)
            dist.broadcast(buf, src=ctx.root)

        def refill(rep):
            if ctx.rank == ctx.root:
                if send is not buf:
                    ctx.patterns.reset(buf)
                ctx.patterns.move(send, 0, rep)
            else:
                ctx.patterns.reset(buf)

        refill(TIMED_REP)
        return Buffers(launch, buf, refill, lambda rep: ctx.patterns.moved_wrong(buf, 0, rep))


class AllGather(Collective):
    name = "all_gather"
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per, per * nranks, per)

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        per = counts.param
        recv = ctx.patterns.empty(counts.recv)
        send = recv[ctx.rank * per:(ctx.rank + 1) * per] if in_place else ctx.patterns.empty(per)

        def refill(rep):
            ctx.patterns.reset(recv)
            ctx.patterns.move(send, ctx.rank * per, rep)

        refill(TIMED_REP)
        return Buffers(lambda _i=0: gather(recv, send), recv, refill, lambda rep: ctx.patterns.moved_wrong(recv, 0, rep))


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per, per)

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        pat = ctx.patterns
        op, after = _reduction(ctx)
        per = counts.param
        send = pat.empty(counts.send)
        recv = send[ctx.rank * per:(ctx.rank + 1) * per] if in_place else pat.empty(per)

        def launch(_i: int = 0):
            scatter(recv, send, op=op)
            after(recv)

        def refill(rep):
            if not in_place:
                pat.reset(recv)
            pat.fill_input(send, 0, ctx.rank, rep)

        refill(TIMED_REP)
        return Buffers(launch, recv, refill, lambda rep: pat.reduced_wrong(recv, ctx.rank * per, rep))


class AllToAll(Collective):
    name = "alltoall"
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per * nranks, per)

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        per, n, rank = counts.param, ctx.nranks, ctx.rank
        send = ctx.patterns.empty(counts.send)
        # rank j's send buffer is the sequence from j*n*per: the chunk for rank r starts at j*n*per + r*per
        aliased = in_place and _can_alias(ctx)
        recv = send if in_place else ctx.patterns.empty(counts.recv)
        scratch = ctx.patterns.empty(counts.recv) if in_place and not aliased else None

        def launch(_i: int = 0):
            if scratch is None:
                dist.all_to_all_single(recv, send)
            else:
                dist.all_to_all_single(scratch, send)
                send.copy_(scratch)

        def refill(rep):
            for buf in (recv, scratch):
                if buf is not None and buf is not send:
                    ctx.patterns.reset(buf)
            ctx.patterns.move(send, rank * n * per, rep)

        def wrong(rep):
            return sum(ctx.patterns.moved_wrong(chunk, src * n * per + rank * per, rep)
                       for src, chunk in enumerate(chunks(recv, n, per)))

        refill(TIMED_REP)
        return Buffers(launch, recv, refill, wrong, checkable=not aliased)


class SendRecv(Collective):
    name = "sendrecv"

    def redop_label(self, op):
        return "sum"  # nccl-tests prints the default op for sendrecv

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        n, rank = ctx.nranks, ctx.rank
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n
        send = ctx.patterns.empty(counts.send)
        aliased = in_place and _can_alias(ctx)
        recv = send if aliased else ctx.patterns.empty(counts.recv)  # gloo in-place: scratch, copied back

        def issue(_i: int = 0):
            dist.isend(send, peer_to)
            dist.irecv(recv, peer_from)

        def launch(_i: int = 0):
            ops = [dist.P2POp(dist.isend, send, peer_to), dist.P2POp(dist.irecv, recv, peer_from)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if in_place and not aliased:
                send.copy_(recv)

        def refill(rep):
            if recv is not send:
                ctx.patterns.reset(recv)
            ctx.patterns.move(send, rank * counts.send, rep)

        refill(TIMED_REP)
        result = send if in_place else recv
        return Buffers(launch, result, refill, lambda rep: ctx.patterns.moved_wrong(result, peer_from * counts.recv,
                                                                                    rep), not aliased, issue)


class _Rooted(Collective):
    """gather and scatter: one root, n shares of `per` elements, busbw (n-1)/n of n x per elements."""

    rooted = True
    gathers = True
    scaled = True


class Gather(_Rooted):
    """nccl-tests' gather.cu: each rank's `per` elements land on the root, in rank order."""

    name = "gather"
    counts = AllGather.counts

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        per, rank = counts.param, ctx.rank
        recv = ctx.patterns.empty(counts.recv)  # every rank has one, as in nccl-tests (in-place data lives in it)
        send = recv[rank * per:(rank + 1) * per] if in_place else ctx.patterns.empty(per)
        parts = chunks(recv, ctx.nranks, per) if rank == ctx.root else None

        def refill(rep):
            ctx.patterns.reset(recv)
            ctx.patterns.move(send, rank * per, rep)

        def wrong(rep):
            return ctx.patterns.moved_wrong(recv, 0, rep) if rank == ctx.root else 0

        refill(TIMED_REP)
        return Buffers(lambda _i=0: dist.gather(send, parts, dst=ctx.root), recv, refill, wrong)


class Scatter(_Rooted):
    """nccl-tests' scatter.cu: the root's buffer is cut into `per`-element chunks, chunk r to rank r."""

    name = "scatter"
    counts = ReduceScatter.counts

    def prepare(self, ctx, counts, in_place):
        dist = torch_module().distributed
        per, rank = counts.param, ctx.rank
        send = ctx.patterns.empty(counts.send)
        recv = send[rank * per:(rank + 1) * per] if in_place else ctx.patterns.empty(per)
        parts = chunks(send, ctx.nranks, per) if rank == ctx.root else None

        def refill(rep):
            if rank == ctx.root:
                ctx.patterns.move(send, 0, rep)
            else:
                ctx.patterns.reset(send)
            if not in_place:
                ctx.patterns.reset(recv)

        refill(TIMED_REP)
        return Buffers(lambda _i=0: dist.scatter(recv, parts, src=ctx.root), recv, refill,
                       lambda rep: ctx.patterns.moved_wrong(recv, rank * per, rep))


COLLECTIVES: dict[str, Collective] = {
    c.name: c for c in (AllReduce(), AllGather(), ReduceScatter(), AllToAll(), Broadcast(), Reduce(), SendRecv(),
                        Gather(), Scatter())
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
