"""The collectives, one small class each, in the shape of nccl-tests' src/<collective>.cu (its testColl).

Each class says how many elements its buffers hold for a message size and where in-place data sits (nccl-tests'
getCollByteCount), its bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md, getBw), what its buffers hold before a
launch and after it (`fill` and `wrong`: nccl-tests' initData and its check), and its launch on each path
(runColl): `torch_launch` through torch.distributed, `nccl_calls` as NCCL calls that direct.py makes through
nccl4py's bindings. The paths supply buffers and launches only; what is filled and checked is the collective's,
the same on both. torch is imported only inside the methods that need it.

Checking (`-c`): the data comes from gpuval.collectives.patterns (per element index, rank and repetition, exact in
the type); `fill` writes this rank's inputs of one repetition and the sentinel into what it receives, `wrong` counts
the received elements that differ from that repetition's expected result (computed chunk by chunk from the same
patterns, never stored). In-place alltoall and sendrecv on NCCL send and receive through one buffer, which races
(nccl-tests reports "N/A" for them): they are timed, not checked.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Callable

from gpuval.collectives.patterns import (  # noqa: F401  (DTYPES, OPS and the lookups are part of this API)
    DTYPES, OPS, chunks, dtype_named, op_named, torch_module,
)
from gpuval.collectives.shapes import (  # noqa: F401  (Buffers and Context are part of this API)
    Buffers, Collective, Context, Counts, NcclCall, per_rank_count,
)
from gpuval.errors import UsageError


def _reduction(ctx: Context) -> tuple[Any, Callable[[Any], None]]:
    """torch's ReduceOp, and what to do to the reduced result afterwards. gloo has no AVG for integer types:
    there AVG is SUM followed by a truncating division (NCCL's integer AVG), timed with the collective."""
    ops = torch_module().distributed.ReduceOp
    if ctx.op == "avg" and ctx.dtype.name.startswith(("int", "uint")) and ctx.device.type != "cuda":
        return ops.SUM, lambda t: t.div_(ctx.nranks, rounding_mode="trunc")
    return getattr(ops, "PRODUCT" if ctx.op == "prod" else ctx.op.upper()), lambda t: None


def can_alias(ctx: Context) -> bool:
    """NCCL sends and receives through one buffer, as nccl-tests' in-place alltoall and sendrecv do (a race, which
    is why neither checks it); gloo cannot, so there in-place receives into scratch and copies back (the copy is
    timed) and the result is checked."""
    return ctx.device.type == "cuda"


def _send(offset: int, count: int, peer: int) -> NcclCall:
    return NcclCall("send", offset, None, count, peer=peer)


def _recv(offset: int, count: int, peer: int) -> NcclCall:
    return NcclCall("recv", None, offset, count, peer=peer)


# ---- the collectives --------------------------------------------------------------------------------------


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True
    scaled = True
    bus_numerator = 2
    in_place_only = True  # torch.distributed has no out-of-place form
    nccl_fn = "all_reduce"

    def fill(self, ctx, data, rep):
        ctx.patterns.reset(data.recv)
        ctx.patterns.fill_input(data.send, 0, ctx.rank, rep)

    def wrong(self, ctx, data, rep):
        return ctx.patterns.reduced_wrong(data.recv, 0, rep)

    def _reduce(self, dist: Any, buf: Any, op: Any, ctx: Context) -> bool:
        """Run the reduction in place; True where this rank holds the result."""
        dist.all_reduce(buf, op=op)
        return True

    def torch_launch(self, ctx, data):
        # torch.distributed reduces in place only. Out-of-place (gloo): the send buffer is copied into the receive
        # buffer, which is then reduced in place; the copy is timed with the call (on NCCL: no such column, N/A).
        dist, (op, after), (send, recv) = torch_module().distributed, _reduction(ctx), (data.send, data.recv)

        def launch(_i: int = 0) -> None:
            if not data.in_place:
                recv.copy_(send)
            if self._reduce(dist, recv, op, ctx):
                after(recv)
        return launch

    def nccl_calls(self, ctx, counts, native):
        return [NcclCall(self.nccl_fn, 0, 0, counts.param, op=True, peer=ctx.root if self.rooted else None)]


class Reduce(AllReduce):
    name = "reduce"
    rooted = True
    scaled = False
    nccl_fn = "reduce"

    def wrong(self, ctx, data, rep):
        return super().wrong(ctx, data, rep) if ctx.rank == ctx.root else 0

    def _reduce(self, dist, buf, op, ctx):
        dist.reduce(buf, dst=ctx.root, op=op)
        return ctx.rank == ctx.root


class Broadcast(Collective):
    name = "broadcast"
    rooted = True
    in_place_only = True

    def fill(self, ctx, data, rep):
        ctx.patterns.reset(data.recv)
        if ctx.rank == ctx.root:
            ctx.patterns.move(data.send, 0, rep)

    def wrong(self, ctx, data, rep):
        return ctx.patterns.moved_wrong(data.recv, 0, rep)

    def torch_launch(self, ctx, data):
        dist, copy = torch_module().distributed, not data.in_place and ctx.rank == ctx.root

        def launch(_i: int = 0) -> None:
            if copy:  # out-of-place (gloo): the root copies its send buffer into the one it broadcasts, timed
                data.recv.copy_(data.send)
            dist.broadcast(data.recv, src=ctx.root)
        return launch

    def nccl_calls(self, ctx, counts, native):
        return [NcclCall("broadcast", 0, 0, counts.param, peer=ctx.root)]


class AllGather(Collective):
    name = "all_gather"
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per, per * nranks, per)

    def in_place_offsets(self, counts, rank):
        return rank * counts.param, 0

    def fill(self, ctx, data, rep):
        ctx.patterns.reset(data.recv)
        ctx.patterns.move(data.send, ctx.rank * data.counts.param, rep)

    def wrong(self, ctx, data, rep):
        return ctx.patterns.moved_wrong(data.recv, 0, rep)

    def torch_launch(self, ctx, data):
        dist = torch_module().distributed
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda _i=0: gather(data.recv, data.send)

    def nccl_calls(self, ctx, counts, native):
        return [NcclCall("all_gather", 0, 0, counts.param)]


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True
    gathers = True
    scaled = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per, per)

    def in_place_offsets(self, counts, rank):
        return 0, rank * counts.param

    fill = AllReduce.fill

    def wrong(self, ctx, data, rep):
        return ctx.patterns.reduced_wrong(data.recv, ctx.rank * data.counts.param, rep)

    def torch_launch(self, ctx, data):
        dist, (op, after) = torch_module().distributed, _reduction(ctx)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

        def launch(_i: int = 0) -> None:
            scatter(data.recv, data.send, op=op)
            after(data.recv)
        return launch

    def nccl_calls(self, ctx, counts, native):
        return [NcclCall("reduce_scatter", 0, 0, counts.param, op=True)]


class AllToAll(Collective):
    name = "alltoall"
    gathers = True
    scaled = True
    races_in_place = True

    def counts(self, count, nranks, typesize):
        per = per_rank_count(count, nranks, typesize)
        return Counts(per * nranks, per * nranks, per)

    def fill(self, ctx, data, rep):
        # rank j's send buffer is the sequence from j*n*per: the chunk for rank r starts at j*n*per + r*per
        ctx.patterns.reset(data.recv)
        ctx.patterns.move(data.send, ctx.rank * data.counts.send, rep)

    def wrong(self, ctx, data, rep):
        n, per = ctx.nranks, data.counts.param
        return sum(ctx.patterns.moved_wrong(chunk, src * n * per + ctx.rank * per, rep)
                   for src, chunk in enumerate(chunks(data.recv, n, per)))

    def torch_launch(self, ctx, data):
        dist, (send, recv) = torch_module().distributed, (data.send, data.recv)
        if not data.in_place or can_alias(ctx):
            return lambda _i=0: dist.all_to_all_single(recv, send)
        scratch = ctx.patterns.empty(data.counts.recv)

        def launch(_i: int = 0) -> None:
            dist.all_to_all_single(scratch, send)
            recv.copy_(scratch)
        return launch

    def nccl_calls(self, ctx, counts, native):
        per = counts.param
        if native:
            return [NcclCall("allto_all", 0, 0, per)]
        return [call for r in range(ctx.nranks) for call in (_send(r * per, per, r), _recv(r * per, per, r))
                if per]


class SendRecv(Collective):
    name = "sendrecv"
    races_in_place = True

    def redop_label(self, op):
        return "sum"  # nccl-tests prints the default op for sendrecv

    def fill(self, ctx, data, rep):
        ctx.patterns.reset(data.recv)
        ctx.patterns.move(data.send, ctx.rank * data.counts.send, rep)

    def wrong(self, ctx, data, rep):
        return ctx.patterns.moved_wrong(data.recv, (ctx.rank - 1) % ctx.nranks * data.counts.recv, rep)

    def torch_launch(self, ctx, data):
        dist, peer_to, peer_from = torch_module().distributed, (ctx.rank + 1) % ctx.nranks, (ctx.rank - 1) % ctx.nranks
        into_recv = not data.in_place or can_alias(ctx)
        into = data.recv if into_recv else ctx.patterns.empty(data.counts.recv)  # gloo in-place: scratch, copied back

        def launch(_i: int = 0) -> None:
            ops = [dist.P2POp(dist.isend, data.send, peer_to), dist.P2POp(dist.irecv, into, peer_from)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if not into_recv:
                data.recv.copy_(into)
        return launch

    def torch_issue(self, ctx, data):
        dist, peer_to, peer_from = torch_module().distributed, (ctx.rank + 1) % ctx.nranks, (ctx.rank - 1) % ctx.nranks

        def issue(_i: int = 0) -> None:
            dist.isend(data.send, peer_to)
            dist.irecv(data.recv, peer_from)
        return issue

    def nccl_calls(self, ctx, counts, native):
        return [_send(0, counts.send, (ctx.rank + 1) % ctx.nranks), _recv(0, counts.recv, (ctx.rank - 1) % ctx.nranks)]


class _Rooted(Collective):
    """gather and scatter: one root, n shares of `per` elements, busbw (n-1)/n of n x per elements; one NCCL call
    from 2.28 on, before that nccl-tests' group of a send and a receive per share."""

    rooted = True
    gathers = True
    scaled = True

    def nccl_calls(self, ctx, counts, native):
        if not counts.param:  # nccl-tests returns before any call
            return []
        if native:  # ncclGather, ncclScatter: the binding is named as the collective
            return [NcclCall(self.name, 0, 0, counts.param, peer=ctx.root)]
        return self._before_native(ctx, counts.param)

    @abstractmethod
    def _before_native(self, ctx: Context, per: int) -> list[NcclCall]:
        """nccl-tests' sends and receives of one launch before NCCL 2.28."""


class Gather(_Rooted):
    """nccl-tests' gather.cu: each rank's `per` elements land on the root, in rank order."""

    name = "gather"
    counts = AllGather.counts
    in_place_offsets = AllGather.in_place_offsets
    fill = AllGather.fill

    def wrong(self, ctx, data, rep):
        return ctx.patterns.moved_wrong(data.recv, 0, rep) if ctx.rank == ctx.root else 0

    def torch_launch(self, ctx, data):
        dist = torch_module().distributed
        parts = chunks(data.recv, ctx.nranks, data.counts.param) if ctx.rank == ctx.root else None
        return lambda _i=0: dist.gather(data.send, parts, dst=ctx.root)

    def _before_native(self, ctx: Context, per: int) -> list[NcclCall]:
        mine = [_send(0, per, ctx.root)]
        return mine + [_recv(r * per, per, r) for r in range(ctx.nranks)] if ctx.rank == ctx.root else mine


class Scatter(_Rooted):
    """nccl-tests' scatter.cu: the root's buffer is cut into `per`-element chunks, chunk r to rank r."""

    name = "scatter"
    counts = ReduceScatter.counts
    in_place_offsets = ReduceScatter.in_place_offsets
    fill = Broadcast.fill

    def wrong(self, ctx, data, rep):
        return ctx.patterns.moved_wrong(data.recv, ctx.rank * data.counts.param, rep)

    def torch_launch(self, ctx, data):
        dist = torch_module().distributed
        parts = chunks(data.send, ctx.nranks, data.counts.param) if ctx.rank == ctx.root else None
        return lambda _i=0: dist.scatter(data.recv, parts, src=ctx.root)

    def _before_native(self, ctx: Context, per: int) -> list[NcclCall]:
        mine = [_recv(0, per, ctx.root)]
        return [_send(r * per, per, r) for r in range(ctx.nranks)] + mine if ctx.rank == ctx.root else mine


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
