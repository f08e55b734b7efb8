"""The step timer on any process group: every collective torch.distributed's functions run (all_reduce,
reduce_scatter_tensor, all_gather_into_tensor, broadcast, barrier, ...), in any group, timed where it is called.

Why this way: it is what FSDP2 (`fully_shard`, whose all-gathers and reduce-scatters are `dist.all_gather_single`
/ `dist.reduce_scatter_single` calls), FSDP1 (`dist.all_gather_into_tensor`, `dist.reduce_scatter_tensor`),
DeepSpeed (torch.distributed underneath) and a training loop's own tensor- or pipeline-parallel groups have in
common, with no change to the program and no hook any of them must offer. Communication hooks are per wrapper
(DDP's bucket hook, FSDP1's gradient hook, FSDP2's custom all-gather / reduce-scatter, which refuse models with
several parameter groups); DDP keeps its hook (its reducer calls no Python function), the rest are covered here.

While the timer runs, those functions (the names in OPS) are wrapped in torch.distributed and in its
distributed_c10d module, and put back at `close`. A call from the thread that started the timer is timed: a
synchronous one as waiting (the call's time, as `timer.wait()` times it), an asynchronous one (`async_op=True`) as
DDP's buckets are (launched then, completed when its future is, the step's wait from its last launch to its last
completion). A call made inside `timer.wait()` or inside another timed call is the caller's, counted once. What it
does not see: code that bound a function before the timer started (`from torch.distributed import all_reduce`),
and functional collectives (torch.distributed._functional_collectives, which DTensor's redistribution uses), which
never call these functions. A program that compiles code calling collectives (torch.compile) breaks its graph at
the wrapper: time those with `timer.wait()`.

Bytes: each counted collective's bus bytes by nccl-tests' definitions over the group it runs in: all_reduce of S
bytes 2(n-1)/n x S, reduce_scatter of an S-byte input and all_gather into an S-byte output (n-1)/n x S; the others
(broadcast, all_to_all, barrier, ...) are timed and move no counted bytes.
"""

from __future__ import annotations

import functools
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

ALL_REDUCE = 2.0  # nccl-tests' bus factor numerators: all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n
GATHER_SCATTER = 1.0
# function -> (the argument whose bytes count, its bus factor); None: timed, no bytes counted
OPS: dict[str, tuple[str, float] | None] = {
    "all_reduce": ("tensor", ALL_REDUCE),
    "reduce_scatter_tensor": ("input", GATHER_SCATTER), "reduce_scatter_single": ("input", GATHER_SCATTER),
    "_reduce_scatter_base": ("input", GATHER_SCATTER), "reduce_scatter": ("input_list", GATHER_SCATTER),
    "all_gather_into_tensor": ("output_tensor", GATHER_SCATTER),
    "all_gather_single": ("output_tensor", GATHER_SCATTER), "_all_gather_base": ("output_tensor", GATHER_SCATTER),
    "all_gather": ("tensor_list", GATHER_SCATTER),
    "broadcast": None, "reduce": None, "all_to_all_single": None, "all_to_all": None, "barrier": None,
    "gather": None, "scatter": None,
}


def tensor_bytes(value: Any) -> int:
    """The bytes of a tensor, or of a list of tensors (0 for anything else)."""
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    try:
        return int(value.numel()) * int(value.element_size())
    except (AttributeError, TypeError, RuntimeError):
        return 0


def bus_bytes(nbytes: int, factor: float, ranks: int) -> int:
    """nccl-tests' bus bytes of a collective over `ranks` ranks moving an `nbytes` buffer (0 for one rank)."""
    return int(nbytes * factor * (ranks - 1) / ranks) if ranks > 1 else 0


@dataclass(frozen=True)
class Timing:
    """What the step timer does with a collective: `idle()` whether to leave it alone (inside another timed one,
    or the timer closed), `waiting(bus)` the block that times a synchronous one as waiting, `launched(bus, call)`
    what launches an asynchronous one and marks its completion."""

    idle: Callable[[], bool]
    waiting: Callable[[int], ContextManager[None]]
    launched: Callable[[int, Callable[[], Any]], Any]


class CollectiveTiming:
    """torch.distributed's collective functions wrapped for a timer (install / remove), from this thread."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.thread = threading.get_ident()
        self._saved: list[tuple[Any, str, Callable[..., Any], Callable[..., Any]]] = []

    def install(self) -> None:
        """Wrap every function of OPS that this torch has, in both modules (once per function)."""
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        for name, counted in OPS.items():
            original = getattr(c10d, name, None) or getattr(dist, name, None)
            if original is None:
                continue
            wrapped = self._wrap(dist, original, counted)
            for module in (dist, c10d):
                if getattr(module, name, None) is original:
                    setattr(module, name, wrapped)
                    self._saved.append((module, name, original, wrapped))

    def remove(self) -> None:
        """Put the functions back (those still the wrappers: a later wrapper of someone else's stays)."""
        for module, name, original, wrapped in reversed(self._saved):
            if getattr(module, name, None) is wrapped:
                setattr(module, name, original)
        self._saved.clear()

    def _wrap(self, dist: Any, original: Callable[..., Any], counted: tuple[str, float] | None) -> Callable[..., Any]:
        signature = inspect.signature(original)
        timing = self.timing

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self.thread or timing.idle():
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs).arguments
            except TypeError:  # the call is wrong: torch says how
                return original(*args, **kwargs)
            bus = 0
            if counted is not None:
                ranks = dist.get_world_size(bound.get("group")) if dist.is_initialized() else 1
                bus = bus_bytes(tensor_bytes(bound.get(counted[0])), counted[1], ranks)
            if bound.get("async_op"):
                return timing.launched(bus, lambda: original(*args, **kwargs))
            with timing.waiting(bus):
                return original(*args, **kwargs)

        return timed
