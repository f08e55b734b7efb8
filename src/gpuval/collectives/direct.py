"""NCCL driven directly, as nccl-tests drives it, through nccl4py's low-level bindings (`nccl.bindings.nccl`,
NVIDIA's Cython bindings of NCCL: one Python call per NCCL call, 5.1-5.8 us per one-rank out-of-place all_reduce
on an H200 where nccl-tests takes 4.6-5.6 and torch.distributed 13-22; nccl4py's checked nccl.core API takes 11).

What is nccl-tests' (src/common.cu, src/<collective>.cu, 2.19 with NCCL 2.28):
- the communicator: rank 0's ncclGetUniqueId, passed to the others through the store the ranks already share
  (torch.distributed's rendezvous), then ncclCommInitRank on every rank;
- memory: one send and one receive buffer of -e bytes each (AllocateBuffs), allocated once for the sweep;
  out-of-place passes both, in-place the receive buffer twice at nccl-tests' in-place offsets (all_gather and
  gather send from the rank's share of the receive buffer, reduce_scatter and scatter receive into it);
- rotation: launch `i` uses the buffers shifted by max(send, recv bytes) x (i mod (-e / that)), so successive
  iterations touch new memory and mid sizes do not sit in L2 (startColl);
- the calls: ncclAllReduce, ncclReduce, ncclBroadcast, ncclAllGather, ncclReduceScatter; sendrecv as ncclSend +
  ncclRecv in one group; alltoall, gather and scatter as ncclAlltoAll, ncclGather, ncclScatter from NCCL 2.28 on,
  before that as nccl-tests groups them (ncclGroupStart, a send and a receive per peer, ncclGroupEnd);
- -m: the aggregated launches of one iteration inside one ncclGroupStart/End.

Everything is on one stream of this rank's (torch's current stream while the sweep runs), so torch's fills and
checks, CUDA events and graph capture see the NCCL calls in order.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from gpuval.collectives.catalog import Collective
from gpuval.collectives.shapes import Buffers, Context, Counts
from gpuval.collectives.patterns import TIMED_REP, chunks
from gpuval.errors import EngineError, UsageError

# ncclDataType_t and ncclRedOp_t by nccl-tests' names (nccl.h; nccl4py's DataType and RedOp enums)
NCCL_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "half": 6, "float": 7, "double": 8, "bfloat16": 9}
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
NATIVE_FROM = 22800  # NCCL 2.28 has ncclAlltoAll, ncclGather and ncclScatter; nccl-tests 2.19 calls them from there
# In-place offsets, in shares of the rank (nccl-tests' sendInplaceOffset / recvInplaceOffset x rank).
_SEND_IN_SHARE = ("all_gather", "gather")
_RECV_IN_SHARE = ("reduce_scatter", "scatter")
_UID_KEYS = itertools.count()  # every rank opens its communicators in the same order: one store key each


@dataclass(frozen=True)
class CommPath:
    """What drives the collectives: nccl4py's bindings (`bindings`, NCCL `version` as 22809), or torch.distributed
    (`bindings` None); `why` says why this path was taken."""

    bindings: Any
    why: str
    version: int = 0

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


def choose_path(via: str, on_gpu: bool) -> CommPath:
    """--via auto: nccl4py's bindings on GPU ranks where they load, else torch.distributed (gloo on CPU ranks);
    --via nccl4py: the bindings or a one-line error; --via torch: torch.distributed."""
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
    return CommPath(bindings, "--via nccl4py" if via == "nccl4py" else "GPU ranks", version)


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
    """The sweep's send and receive buffers, -e bytes each (uint8 tensors; NCCL gets their addresses)."""

    send: Any
    recv: Any
    nbytes: int

    @classmethod
    def allocate(cls, torch: Any, nbytes: int, device: Any) -> "Memory":
        padded = max(8, -(-nbytes // 8) * 8)  # whole elements of every type at every offset used
        return cls(torch.empty(padded, dtype=torch.uint8, device=device),
                   torch.empty(padded, dtype=torch.uint8, device=device), nbytes)


class DirectRunner:
    """Prepares each size and side of a sweep as nccl-tests' startColl would run it: `Buffers.launch(i)` is the
    i-th launch (warm-up i, timed iteration x -m + aggregated index, 0 for the sync and check launches)."""

    def __init__(self, comm: Comm, memory: Memory, ctx: Context, stream: int) -> None:
        self.comm, self.memory, self.ctx, self.stream = comm, memory, ctx, stream
        self.dt = NCCL_DTYPES[ctx.dtype.name]
        self.op = NCCL_OPS[ctx.op]

    def group(self) -> contextlib.AbstractContextManager[None]:
        """ncclGroupStart ... ncclGroupEnd (-m on the direct path)."""
        return _grouped(self.comm.nccl)

    def prepare(self, coll: Collective, counts: Counts, in_place: bool) -> Buffers:
        """One size and side: its launch, and its data written at the launch-0 position (the check's)."""
        es = self.ctx.dtype.size
        total = max(counts.send, counts.recv) * es
        steps = max(self.memory.nbytes // total, 1) if total else 1
        share = counts.param * self.ctx.rank * es
        recv0 = self.memory.recv.data_ptr()
        send0 = recv0 + (share if coll.name in _SEND_IN_SHARE else 0) if in_place else self.memory.send.data_ptr()
        recv0 += share if in_place and coll.name in _RECV_IN_SHARE else 0
        send_t = _elements(self.memory.recv if in_place else self.memory.send, send0, counts.send, self.ctx)
        recv_t = _elements(self.memory.recv, recv0, counts.recv, self.ctx)
        launch = self._launcher(coll, counts, send0, recv0, total, steps)
        refill, wrong, checkable = _check_plan(coll.name, self.ctx, counts, send_t, recv_t, in_place)
        refill(TIMED_REP)
        return Buffers(launch, recv_t, refill, wrong, checkable, group=self.group)

    def _launcher(self, coll: Collective, counts: Counts, send0: int, recv0: int, total: int,
                  steps: int) -> Callable[[int], None]:
        nccl, handle, stream, dt, op = self.comm.nccl, self.comm.handle, self.stream, self.dt, self.op
        root, per, count = self.ctx.root, counts.param, counts.param
        single: dict[str, tuple[Callable[..., None], tuple[Any, ...]]] = {
            "all_reduce": (nccl.all_reduce, (count, dt, op, handle, stream)),
            "reduce": (nccl.reduce, (count, dt, op, root, handle, stream)),
            "broadcast": (nccl.broadcast, (count, dt, root, handle, stream)),
            "all_gather": (nccl.all_gather, (per, dt, handle, stream)),
            "reduce_scatter": (nccl.reduce_scatter, (per, dt, op, handle, stream)),
        }
        if self.comm.version >= NATIVE_FROM:
            single.update({"alltoall": (nccl.allto_all, (per, dt, handle, stream)),
                           "gather": (nccl.gather, (per, dt, root, handle, stream)),
                           "scatter": (nccl.scatter, (per, dt, root, handle, stream))})
        if coll.name in single and not (coll.name in ("gather", "scatter") and per == 0):
            call, rest = single[coll.name]

            def launch(i: int = 0) -> None:
                shift = total * (i % steps)
                call(send0 + shift, recv0 + shift, *rest)
            return launch
        ops = self._grouped_ops(coll.name, counts)
        if not ops:  # gather or scatter of 0 elements: nccl-tests returns before any call
            return lambda i=0: None

        def grouped(i: int = 0) -> None:  # not `with _grouped(...)`: a generator per timed launch costs ~1 us
            shift = total * (i % steps)
            nccl.group_start()
            try:
                for call, send_off, recv_off, args in ops:
                    call((send0 if send_off is not None else recv0) + shift + (send_off or recv_off or 0), *args)
            finally:
                nccl.group_end()
        return grouped

    def _grouped_ops(self, name: str, counts: Counts) -> list[tuple[Callable[..., None], int | None, int | None,
                                                                      tuple[Any, ...]]]:
        """(call, send offset or None, receive offset or None, the rest of its arguments) for nccl-tests' grouped
        forms: sendrecv always; alltoall, gather, scatter before NCCL 2.28 (and gather/scatter of 0 elements: no
        call, as nccl-tests returns early)."""
        nccl, handle, stream, dt = self.comm.nccl, self.comm.handle, self.stream, self.dt
        rank, n, root, es = self.ctx.rank, self.ctx.nranks, self.ctx.root, self.ctx.dtype.size
        per = counts.param

        def send(offset: int, elements: int, peer: int) -> Any:
            return nccl.send, offset, None, (elements, dt, peer, handle, stream)

        def recv(offset: int, elements: int, peer: int) -> Any:
            return nccl.recv, None, offset, (elements, dt, peer, handle, stream)

        if name == "sendrecv":
            return [send(0, counts.send, (rank + 1) % n), recv(0, counts.recv, (rank - 1) % n)]
        if per == 0:
            return []
        if name == "alltoall":
            return [op for r in range(n) for op in (send(r * per * es, per, r), recv(r * per * es, per, r))]
        if name == "gather":
            return [send(0, per, root)] + ([recv(r * per * es, per, r) for r in range(n)] if rank == root else [])
        return ([send(r * per * es, per, r) for r in range(n)] if rank == root else []) + [recv(0, per, root)]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def _grouped(nccl: Any) -> Iterator[None]:
    nccl.group_start()
    try:
        yield
    finally:
        nccl.group_end()


def _elements(raw: Any, address: int, length: int, ctx: Context) -> Any:
    """`length` elements of the sweep's type at `address` inside the uint8 buffer `raw` (a view, no copy)."""
    start = address - raw.data_ptr()
    torch = ctx.patterns.torch
    return raw[start:start + length * ctx.dtype.size].view(getattr(torch, ctx.dtype.torch_name))


def _check_plan(name: str, ctx: Context, counts: Counts, send: Any, recv: Any,
                in_place: bool) -> tuple[Callable[[int], None], Callable[[int], Any], bool]:
    """(refill, wrong, checkable) for the data at the launch-0 position: inputs of repetition `rep` written, the
    receive side holding the sentinel; `wrong(rep)` counts this rank's wrong elements. In-place alltoall and
    sendrecv send and receive through one buffer (a race): timed, not checked."""
    pat, rank, n, root, per = ctx.patterns, ctx.rank, ctx.nranks, ctx.root, counts.param
    reset_recv = (lambda: None) if in_place else (lambda: pat.reset(recv))

    def refill(rep: int) -> None:
        reset_recv()
        if name in ("all_reduce", "reduce", "reduce_scatter"):
            pat.fill_input(send, 0, rank, rep)
        elif name in ("broadcast", "scatter") and rank == root:
            pat.move(send, 0, rep)
        elif name in ("broadcast", "scatter"):
            pat.reset(send)
        elif name in ("all_gather", "gather"):
            pat.reset(recv)  # in-place: the rank's share is written next, inside it
            pat.move(send, rank * per, rep)
        else:  # alltoall, sendrecv: this rank's part of the one sequence
            pat.move(send, rank * counts.send, rep)

    def wrong(rep: int) -> Any:
        if name in ("reduce", "gather") and rank != root:
            return 0
        if name in ("all_reduce", "reduce"):
            return pat.reduced_wrong(recv, 0, rep)
        if name == "reduce_scatter":
            return pat.reduced_wrong(recv, rank * per, rep)
        if name == "scatter":
            return pat.moved_wrong(recv, rank * per, rep)
        if name == "alltoall":
            return sum(pat.moved_wrong(chunk, src * n * per + rank * per, rep)
                       for src, chunk in enumerate(chunks(recv, n, per)))
        if name == "sendrecv":
            return pat.moved_wrong(recv, ((rank - 1) % n) * counts.recv, rep)
        return pat.moved_wrong(recv, 0, rep)  # broadcast, all_gather, gather

    return refill, wrong, not (in_place and name in ("alltoall", "sendrecv"))
