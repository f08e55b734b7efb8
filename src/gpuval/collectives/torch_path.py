"""The torch.distributed path: CPU ranks on gloo, and GPU ranks where nccl4py cannot load (or --via torch).

It supplies what direct.py supplies for NCCL through nccl4py, and nothing more: the memory of each size and side
(fresh tensors holding the sentinel, laid out as nccl-tests lays out its buffers) and the collective's torch call
(catalog's `torch_launch`). What is filled and checked is the collective's own (`fill`, `wrong`).
"""

from __future__ import annotations

from gpuval.collectives import catalog
from gpuval.collectives.shapes import Buffers, Collective, Context, Counts


class TorchRunner:
    """Prepares each size and side of a sweep through torch.distributed."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def prepare(self, coll: Collective, counts: Counts, in_place: bool) -> Buffers | None:
        """One size and side: its buffers, its launch and its data written; None for a side torch.distributed
        does not have (N/A)."""
        ctx = self.ctx
        if not coll.torch_side(ctx, in_place):
            return None
        recv = ctx.patterns.empty(max(counts.send, counts.recv) if in_place else counts.recv)
        send = recv if in_place else ctx.patterns.empty(counts.send)
        data = coll.data(counts, ctx.rank, in_place, send, recv)
        # in-place alltoall and sendrecv through one buffer race on NCCL (N/A); gloo receives into scratch
        checkable = not (in_place and coll.races_in_place and catalog.can_alias(ctx))
        return coll.prepared(ctx, data, coll.torch_launch(ctx, data), checkable, coll.torch_issue(ctx, data))
