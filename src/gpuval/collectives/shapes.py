"""What every collective's buffers are: counts per rank (nccl-tests' getCollByteCount), what a rank needs to fill
and run one (Context), and one prepared collective (Buffers), whichever path drives it (catalog.py: torch.distributed;
direct.py: NCCL through nccl4py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gpuval.collectives.patterns import DType, Patterns, Spec


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


@dataclass
class Buffers:
    """One prepared collective.

    `launch(i)` runs it once as the i-th launch of its size (nccl-tests' iteration index: the direct path rotates
    its buffer offsets by it; torch's calls ignore it). `refill(rep)` writes the inputs of repetition `rep` and puts
    the sentinel back into the receive buffers; `wrong(rep)` then counts this rank's wrong elements of `result` (a
    0-d tensor or 0). `checkable` False: the result cannot be checked (N/A, never counted). `issue` is the call as
    made inside an aggregated group (-m on NCCL), when it differs from `launch`; `group` opens that group where it
    is not torch's (the direct path: ncclGroupStart/End)."""

    launch: Callable[..., None]
    result: Any
    refill: Callable[[int], None]
    wrong: Callable[[int], Any] = lambda rep: 0
    checkable: bool = True
    issue: Callable[..., None] | None = None
    group: Callable[[], Any] | None = None
