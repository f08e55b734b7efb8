"""NCCL driven directly, as nccl-tests drives it, through nccl4py's low-level bindings (`nccl.bindings.nccl`,
NVIDIA's Cython bindings of NCCL: one Python call per NCCL call, 5.1-5.8 us per one-rank out-of-place reduction
on an H200 where nccl-tests takes 4.6-5.6 and torch.distributed 13-22; nccl4py's checked nccl.core API takes 11).

What is nccl-tests' (src/common.cu, src/<collective>.cu, 2.19 with NCCL 2.28):
- the communicator: rank 0's ncclGetUniqueId, passed to the others through the store the ranks already share
  (torch.distributed's rendezvous), then ncclCommInitRank on every rank: the one NCCL communicator of the rank
  (the ranks' torch.distributed group is gloo, for the barriers and -a, as nccl-tests uses MPI on the host);
- memory: one send and one receive buffer of -e bytes each (AllocateBuffs), allocated once for the sweep with
  ncclMemAlloc (nccl4py's torch allocator, `nccl.core.interop.torch.empty`); out-of-place passes both, in-place the
  receive buffer twice at the collective's in-place offsets (catalog's `in_place_offsets`);
- rotation: launch `i` uses the buffers shifted by max(send, recv bytes) x (i mod (-e / that)), so successive
  iterations touch new memory and mid sizes do not sit in L2 (startColl);
- the calls: what each collective lists in catalog's `nccl_calls` (its runColl): one call alone, several in one
  ncclGroupStart/End (point-to-point calls, as nccl-tests groups them), none where nccl-tests returns early;
- -m: the aggregated launches of one iteration inside one ncclGroupStart/End.

This module names no collective: it supplies the communicator, the memory, the rotation and the calls.
Everything is on one stream of this rank's (torch's current stream while the sweep runs), so torch's fills and
checks, CUDA events and graph capture see the NCCL calls in order.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from gpuval.collectives.shapes import Buffers, Collective, Context, Counts, NcclCall
from gpuval.errors import EngineError, UsageError

# ncclDataType_t and ncclRedOp_t by nccl-tests' names (nccl.h; nccl4py's DataType and RedOp enums)
NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "half": 6, "float": 7, "double": 8, "bfloat16": 9}
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
NATIVE_FROM = 22800  # the NCCL version whose calls catalog's `nccl_calls` may use natively (nccl-tests 2.19's rule)
_UID_KEYS = itertools.count()  # every rank opens its communicators in the same order: one store key each
_Bound = tuple[Callable[..., None], int, "int | None", tuple[Any, ...]]


@dataclass(frozen=True)
class CommPath:
    """What drives the collectives: nccl4py's bindings (`bindings`, NCCL `version` as 22809), or torch.distributed
    (`bindings` None); `why` says why this path was taken. `allocator`: nccl4py's torch allocator on ncclMemAlloc
    (None: torch's allocator, and `allocator_why` says why)."""

    bindings: Any
    why: str
    version: int = 0
    allocator: Any = None
    allocator_why: str = ""

    def describe(self) -> str:
        if self.bindings is None:
            return f"torch.distributed ({self.why})"
        major, minor, patch = self.version // 10000, self.version // 100 % 100, self.version % 100
        return f"NCCL {major}.{minor}.{patch} called directly by nccl4py's bindings ({self.why})"


def load_bindings() -> tuple[Any, int, str]:
    """(nccl.bindings.nccl, NCCL's version, "") or (None, 0, why not): nccl4py missing, or no libnccl it can load."""
    try:
        from nccl.bindings import nccl as bindings  # type: ignore[import-not-found]

        return bindings, int(bindings.get_version()), ""
    except Exception as exc:  # ImportError, nccl4py's DynamicLibNotFoundError, an NCCLError: all "cannot load"
        return None, 0, f"nccl4py cannot load: {_first_line(exc)}"


def load_allocator() -> tuple[Any, str]:
    """(nccl4py's torch allocator on ncclMemAlloc, "") or (None, why not): its nccl.core needs cuda-core, which a
    bare install of the bindings may lack."""
    try:
        from nccl.core.interop.torch import empty  # type: ignore[import-not-found]

        return empty, ""
    except Exception as exc:  # ImportError, or cuda.core failing to initialise: the bindings still work
        return None, f"nccl4py's nccl.core cannot load: {_first_line(exc)}"


def choose_path(via: str, on_gpu: bool) -> CommPath:
    """--via auto: nccl4py's bindings on GPU ranks where they load, else torch.distributed (gloo on CPU ranks);
    --via nccl4py: the bindings, or a one-line error where they cannot load or the ranks have no GPU (NCCL moves
    GPU memory; only a stand-in that declares HOST_MEMORY, as the tests' does, runs on CPU ranks);
    --via torch: torch.distributed."""
    if via == "torch":
        return CommPath(None, "--via torch")
    if via == "auto" and not on_gpu:
        return CommPath(None, "CPU ranks: gloo")
    bindings, version, why = load_bindings()
    if bindings is None:
        if via == "nccl4py":
            raise UsageError(f"--via nccl4py: {why}")
        return CommPath(None, f"{why}; scripts/install.sh installs it on GPU nodes: nccl4py with the cuda-bindings "
                              "of torch's CUDA major")
    stand_in = getattr(bindings, "HOST_MEMORY", False) is True
    if not on_gpu and not stand_in:
        raise UsageError("--via nccl4py needs GPU ranks: NCCL moves GPU memory, and these ranks run on the CPU "
                         "(--via auto or torch measures them through gloo)")
    allocator, allocator_why = load_allocator()
    reason = "--via nccl4py" if via == "nccl4py" else "GPU ranks"
    if stand_in:
        reason += "; a stand-in on host memory"
    return CommPath(bindings, reason, version, allocator, allocator_why)


@dataclass
class Comm:
    """One NCCL communicator of this rank."""

    nccl: Any
    handle: Any
    rank: int
    nranks: int
    version: int

    def close(self, ok: bool) -> None:
        """ncclCommFinalize + ncclCommDestroy after a sweep; ncclCommAbort after a failure (a peer may be gone)."""
        if ok:
            self.nccl.comm_finalize(self.handle)
            self.nccl.comm_destroy(self.handle)
        else:
            with contextlib.suppress(Exception):
                self.nccl.comm_abort(self.handle)


def open_comm(path: CommPath, store: Any, rank: int, nranks: int) -> Comm:
    """ncclCommInitRank on every rank with rank 0's unique id, handed over through the job's store."""
    nccl = path.bindings
    key = f"gpuval-nccl4py/uid/{next(_UID_KEYS)}"
    try:
        if rank == 0:
            uid = nccl.get_unique_id()
            store.set(key, bytes(uid))
        else:
            uid = nccl.UniqueId.from_buffer(bytearray(store.get(key)))
        return Comm(nccl, nccl.comm_init_rank(nranks, uid, rank), rank, nranks, path.version)
    except Exception as exc:
        raise EngineError(f"rank {rank}: NCCL communicator through nccl4py: {_first_line(exc)}") from None


@dataclass
class Memory:
    """The sweep's send and receive buffers, -e bytes each (uint8 tensors; NCCL gets their addresses), from
    ncclMemAlloc as nccl-tests 2.19 allocates them (AllocateBuffs), so that NCCL registers them as it registers
    nccl-tests' (NVLS user buffers under -G take the same path); torch's caching allocator where nccl4py's
    allocator cannot load (the header says so)."""

    send: Any
    recv: Any
    nbytes: int

    @classmethod
    def allocate(cls, path: CommPath, torch: Any, nbytes: int, device: Any) -> "Memory":
        padded = max(8, -(-nbytes // 8) * 8)  # whole elements of every type at every offset used
        empty = path.allocator or torch.empty
        return cls(empty(padded, dtype=torch.uint8, device=device), empty(padded, dtype=torch.uint8, device=device),
                   nbytes)


class DirectRunner:
    """Prepares each size and side of a sweep as nccl-tests' startColl would run it: `Buffers.launch(i)` is the
    i-th launch (warm-up i, timed iteration x -m + aggregated index, 0 for the sync and check launches). The
    collective says which NCCL calls a launch makes (catalog's `nccl_calls`) and what its buffers hold; this
    supplies the communicator, the memory, the rotation and the calls through the bindings."""

    def __init__(self, comm: Comm, memory: Memory, ctx: Context, stream: int) -> None:
        self.comm, self.memory, self.ctx, self.stream = comm, memory, ctx, stream
        self.dt = NCCL_DTYPES[ctx.dtype.name]
        self.op = NCCL_OPS[ctx.op]

    def group(self) -> contextlib.AbstractContextManager[None]:
        """ncclGroupStart ... ncclGroupEnd (-m on the direct path)."""
        return _grouped(self.comm.nccl)

    def prepare(self, coll: Collective, counts: Counts, in_place: bool) -> Buffers:
        """One size and side: its launch, and its data written at the launch-0 position (the check's)."""
        ctx, memory, es = self.ctx, self.memory, self.ctx.dtype.size
        total = max(counts.send, counts.recv) * es
        steps = max(memory.nbytes // total, 1) if total else 1
        typed = ctx.patterns.tdtype
        data = coll.data(counts, ctx.rank, in_place, memory.send[:total].view(typed), memory.recv[:total].view(typed))
        at_send, at_recv = coll.in_place_offsets(counts, ctx.rank) if in_place else (0, 0)
        send0 = (memory.recv if in_place else memory.send).data_ptr() + at_send * es
        recv0 = memory.recv.data_ptr() + at_recv * es
        native = self.comm.version >= NATIVE_FROM
        calls = [self._bind(call, send0, recv0) for call in coll.nccl_calls(ctx, counts, native)]
        # a collective that races in place (one buffer both ways) is timed there, not checked
        return coll.prepared(ctx, data, self._launcher(calls, total, steps), not (in_place and coll.races_in_place),
                             group=self.group)

    def _bind(self, call: NcclCall, send0: int, recv0: int) -> _Bound:
        """The binding and its arguments at the launch-0 position: (function, first address, second address or
        None, the rest in NCCL's order)."""
        es = self.ctx.dtype.size
        at = [base + offset * es for base, offset in ((send0, call.send), (recv0, call.recv)) if offset is not None]
        rest = ((call.count, self.dt) + ((self.op,) if call.op else ()) + (() if call.peer is None else (call.peer,))
                + (self.comm.handle, self.stream))
        return getattr(self.comm.nccl, call.fn), at[0], at[1] if len(at) > 1 else None, rest

    def _launcher(self, calls: list[_Bound], total: int, steps: int) -> Callable[[int], None]:
        """Launch i: every call at its buffers shifted by total x (i mod steps); several calls in one group."""
        nccl = self.comm.nccl
        if not calls:  # nothing to move (a share of 0 elements): nccl-tests returns before any call
            return lambda i=0: None
        if len(calls) == 1 and calls[0][2] is not None:
            call, send0, recv0, rest = calls[0]

            def launch(i: int = 0) -> None:
                shift = total * (i % steps)
                call(send0 + shift, recv0 + shift, *rest)
            return launch

        def grouped(i: int = 0) -> None:  # not `with _grouped(...)`: a generator per timed launch costs ~1 us
            shift = total * (i % steps)
            nccl.group_start()
            try:
                for call, first, second, rest in calls:
                    if second is None:
                        call(first + shift, *rest)
                    else:
                        call(first + shift, second + shift, *rest)
            finally:
                nccl.group_end()
        return grouped


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def _grouped(nccl: Any) -> Iterator[None]:
    nccl.group_start()
    try:
        yield
    finally:
        nccl.group_end()
