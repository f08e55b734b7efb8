"""The shape every collective has, whichever path drives it (torch_path.py: torch.distributed; direct.py: NCCL
through nccl4py): counts per rank (nccl-tests' getCollByteCount), what a rank needs to fill and run one (Context),
the send and receive buffers of one size and side (Data), one NCCL call as a collective describes it (NcclCall),
one prepared collective (Buffers), and the base class each collective of catalog.py fills in (Collective: nccl-tests'
testColl)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuval.collectives.patterns import TIMED_REP, DType, Patterns, Spec


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
    """What a rank needs to fill and run a collective; `patterns` is created from the rest."""

    rank: int
    nranks: int
    dtype: DType
    op: str
    root: int
    device: Any  # torch.device
    patterns: Patterns = field(init=False)

    def __post_init__(self) -> None:
        self.patterns = Patterns(Spec(self.dtype, self.op, self.nranks), self.device)


@dataclass(frozen=True)
class Data:
    """The send and receive buffers of one size and side, in the sweep's type (tensor views), as nccl-tests lays
    them out: out-of-place two buffers; in-place both inside the one receive buffer, at the collective's in-place
    offsets (so `send` and `recv` may be views of the same memory)."""

    send: Any
    recv: Any
    counts: Counts
    in_place: bool


@dataclass(frozen=True)
class NcclCall:
    """One NCCL call of a launch, in nccl4py's bindings' terms: the binding's name, its buffer offsets in elements
    (`send` into the send buffer, `recv` into the receive buffer; None where the call takes no such buffer, as
    ncclSend and ncclRecv), its count, whether it takes the reduction (`op`) and its root or peer rank (`peer`).
    The arguments follow in NCCL's order: buffers, count, datatype, [op], [root | peer], comm, stream."""

    fn: str
    send: int | None
    recv: int | None
    count: int
    op: bool = False
    peer: int | None = None


@dataclass
class Buffers:
    """One prepared collective.

    `launch(i)` runs it once as the i-th launch of its size (nccl-tests' iteration index: the direct path rotates
    its buffer offsets by it; torch's calls ignore it). `refill(rep)` writes the inputs of repetition `rep` and puts
    the sentinel back into the receive buffers; `wrong(rep)` then counts this rank's wrong elements (a 0-d tensor
    or 0). `checkable` False: the result cannot be checked (N/A, never counted). `issue` is the call as made
    inside an aggregated group (-m on NCCL), when it differs from `launch`; `group` opens that group where it is
    not torch's (the direct path: ncclGroupStart/End)."""

    launch: Callable[..., None]
    refill: Callable[[int], None]
    wrong: Callable[[int], Any]
    checkable: bool = True
    issue: Callable[..., None] | None = None
    group: Callable[[], Any] | None = None


class Collective(ABC):
    """Base shape; subclasses set the class attributes and fill in `fill`, `wrong`, `torch_launch`, `nccl_calls`
    (and `counts`, `in_place_offsets` where they differ from all_reduce's)."""

    name: str = ""
    reduces = False  # takes -o
    rooted = False  # takes -r
    gathers = False  # bytes counted = count x typesize x nranks
    bus_numerator = 1  # busbw factor = numerator * (n-1)/n when `scaled`, else 1
    scaled = False
    in_place_only = False  # torch.distributed has only the in-place call: out-of-place is N/A on NCCL through torch
    races_in_place = False  # in-place sends and receives through one buffer: a race where NCCL does it, never checked

    def counts(self, count: int, nranks: int, typesize: int) -> Counts:
        """Buffer sizes for `count` elements on `nranks` ranks (nccl-tests' getCollByteCount)."""
        return Counts(count, count, count)

    def in_place_offsets(self, counts: Counts, rank: int) -> tuple[int, int]:
        """Where in-place send and receive data start inside the one buffer, in elements (nccl-tests'
        sendInplaceOffset and recvInplaceOffset, times the rank)."""
        return 0, 0

    def data(self, counts: Counts, rank: int, in_place: bool, send: Any, recv: Any) -> Data:
        """This side's send and receive views of the path's memory (`send` and `recv` hold at least max(send, recv)
        elements of the sweep's type; in place, only `recv` is used)."""
        if not in_place:
            return Data(send[:counts.send], recv[:counts.recv], counts, False)
        at_send, at_recv = self.in_place_offsets(counts, rank)
        return Data(recv[at_send:at_send + counts.send], recv[at_recv:at_recv + counts.recv], counts, True)

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

    def prepared(self, ctx: Context, data: Data, launch: Callable[..., None], checkable: bool,
                 issue: Callable[..., None] | None = None, group: Callable[[], Any] | None = None) -> Buffers:
        """A path's launch with this collective's fill and check, the data of the timed launches written."""
        self.fill(ctx, data, TIMED_REP)
        return Buffers(launch, lambda rep: self.fill(ctx, data, rep), lambda rep: self.wrong(ctx, data, rep),
                       checkable, issue, group)

    @abstractmethod
    def fill(self, ctx: Context, data: Data, rep: int) -> None:
        """nccl-tests' initData: this rank's inputs of repetition `rep`, and the sentinel in what it receives."""

    @abstractmethod
    def wrong(self, ctx: Context, data: Data, rep: int) -> Any:
        """This rank's received elements that are not the expected result of repetition `rep` (0 where this rank
        receives no result)."""

    @abstractmethod
    def torch_launch(self, ctx: Context, data: Data) -> Callable[..., None]:
        """runColl through torch.distributed: one launch on `data` (its argument, the launch index, is ignored)."""

    def torch_issue(self, ctx: Context, data: Data) -> Callable[..., None] | None:
        """The torch call as made inside an aggregated group (-m), where it differs from the launch."""
        return None

    @abstractmethod
    def nccl_calls(self, ctx: Context, counts: Counts, native: bool) -> list[NcclCall]:
        """runColl as NCCL calls (one: made alone; more: one ncclGroupStart/End around them; none: nothing to run);
        `native`: NCCL has ncclAlltoAll, ncclGather and ncclScatter (2.28 on)."""
