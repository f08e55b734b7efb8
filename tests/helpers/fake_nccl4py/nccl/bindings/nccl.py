"""A stand-in for nccl4py's low-level bindings (`nccl.bindings.nccl`, nccl4py 0.6.0) on a machine without GPUs.

The same function names and signatures as nccl4py's Cython bindings: addresses as ints, counts in elements,
ncclDataType_t / ncclRedOp_t as ints, a communicator handle, a stream (ignored). Each call does what NCCL does to
the memory at those addresses (the host memory of CPU tensors), across the ranks of the torch.distributed (gloo)
group this process joined: ncclAllReduce copies the send buffer's reduction into the receive buffer, ncclSend and
ncclRecv pair up by peer inside ncclGroupStart/End, and so on. Inside a group, calls are deferred to the
outermost ncclGroupEnd, as NCCL defers them. ncclAvg is NCCL's: floats pre-multiplied by 1/n then summed (which
rounds), integers summed then divided (truncating).

ncclCommInitRank checks what NCCL's bootstrap needs: every rank holds the same unique id, ranks and size match; it
logs the backend of torch's default process group beside it, so a test can count the NCCL communicators a rank
holds (nccl4py's, and torch's where its group is NCCL). ncclMemAlloc hands out host memory of its own and every
collective call logs whether its buffers lie in such memory (`nccl_mem`), as NCCL tells its registrable buffers
from others; nccl/core/interop/torch.py is nccl4py's torch allocator on it.

HOST_MEMORY says what this stand-in is: NCCL on host memory, which gpuval lets run on CPU ranks (a real nccl4py
moves GPU memory only).

GPUVAL_FAKE_NCCL_VERSION (default 22809) is the NCCL version it claims (below 22800: no ncclAlltoAll, ncclGather,
ncclScatter, as NCCL before 2.28, so the grouped forms are used). With GPUVAL_FAKE_NCCL4PY_LOG set, every call is
appended to that file as a JSON line (pid, the function, its addresses and counts, the group depth).
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any, Callable

import torch
import torch.distributed as dist

__version__ = "2.28.9"
HOST_MEMORY = True
_VERSION = int(os.environ.get("GPUVAL_FAKE_NCCL_VERSION", "22809"))
_TYPES = {0: torch.int8, 1: torch.uint8, 2: torch.int32, 4: torch.int64, 6: torch.float16, 7: torch.float32,
          8: torch.float64, 9: torch.bfloat16}
_OPS = {0: "SUM", 1: "PRODUCT", 2: "MAX", 3: "MIN", 4: "SUM"}
_AVG = 4
_COMMS: dict[int, tuple[int, int]] = {}  # handle -> (rank, nranks)
_GROUP: list[Any] = [0, []]  # depth, deferred calls
_ALLOCATED: dict[int, Any] = {}  # ncclMemAlloc: address -> the host memory behind it


class NCCLError(Exception):
    """NCCL's error, as nccl4py raises it."""


class UniqueId:
    """ncclUniqueId: 128 bytes."""

    def __init__(self, data: bytes = bytes(128)) -> None:
        self._data = bytes(data)

    def __bytes__(self) -> bytes:
        return self._data

    @classmethod
    def from_buffer(cls, buffer: Any) -> "UniqueId":
        data = bytes(buffer)
        if len(data) != 128:
            raise ValueError(f"buf must be a 1D contiguous writable buffer, of size 128 (got {len(data)})")
        return cls(data)


def _log(fn: str, **fields: Any) -> None:
    path = os.environ.get("GPUVAL_FAKE_NCCL4PY_LOG")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "rank": dist.get_rank(), "fn": fn, "depth": _GROUP[0],
                                  **fields}) + "\n")


def get_version() -> int:
    return _VERSION


def mem_alloc(size: int) -> int:
    """ncclMemAlloc: `size` bytes of memory this allocator owns, by address."""
    memory = (ctypes.c_char * max(size, 1))()
    address = ctypes.addressof(memory)
    _ALLOCATED[address] = memory
    _log("mem_alloc", ptr=address, size=size)
    return address


def mem_free(ptr: int) -> None:
    """ncclMemFree: only what ncclMemAlloc gave."""
    if _ALLOCATED.pop(ptr, None) is None:
        raise NCCLError(f"NCCL_INVALID_ARGUMENT: {ptr:#x} was not allocated by ncclMemAlloc")
    _log("mem_free", ptr=ptr)


def allocated_memory(ptr: int) -> Any:
    """The host memory behind an address ncclMemAlloc gave (for the torch allocator)."""
    return _ALLOCATED[ptr]


def _nccl_mem(*addresses: int) -> bool:
    """Every address lies in memory from ncclMemAlloc."""
    regions = [(start, ctypes.sizeof(memory)) for start, memory in _ALLOCATED.items()]
    return all(any(start <= a < start + size for start, size in regions) for a in addresses)


def get_unique_id() -> UniqueId:
    return UniqueId(os.urandom(128))


def comm_init_rank(nranks: int, comm_id: Any, rank: int) -> int:
    if not isinstance(comm_id, UniqueId):
        raise TypeError(f"comm_id must be a UniqueId, got {type(comm_id).__name__}")
    ids: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ids, bytes(comm_id))
    if nranks != dist.get_world_size() or rank != dist.get_rank():
        raise NCCLError(f"NCCL_INVALID_ARGUMENT: rank {rank} of {nranks} in a group of {dist.get_world_size()}")
    if len(set(ids)) != 1:
        raise NCCLError("NCCL_SYSTEM_ERROR: the ranks hold different unique ids (bootstrap never connects)")
    handle = 0x1000 + len(_COMMS)
    _COMMS[handle] = (rank, nranks)
    _log("comm_init_rank", nranks=nranks, rank=rank, comm=handle, torch_group=dist.get_backend())
    return handle


def _comm(comm: int) -> tuple[int, int]:
    if comm not in _COMMS:
        raise NCCLError(f"NCCL_INVALID_ARGUMENT: no communicator {comm:#x}")
    return _COMMS[comm]


def comm_finalize(comm: int) -> None:
    _comm(comm)
    _log("comm_finalize", comm=comm)


def comm_destroy(comm: int) -> None:
    _comm(comm)
    del _COMMS[comm]
    _log("comm_destroy", comm=comm)


def comm_abort(comm: int) -> None:
    _COMMS.pop(comm, None)
    _log("comm_abort", comm=comm)


def _view(ptr: int, count: int, datatype: int) -> torch.Tensor:
    """`count` elements of `datatype` at address `ptr` (shares the memory)."""
    kind = _TYPES[datatype]
    if count == 0:
        return torch.empty(0, dtype=kind)
    raw = (ctypes.c_char * (count * kind.itemsize)).from_address(ptr)
    return torch.frombuffer(raw, dtype=kind, count=count)


def _reduce_in(values: torch.Tensor, op: int, nranks: int) -> torch.Tensor:
    """What a rank contributes: floats pre-multiplied by T(1/n) for avg (NCCL's PreMulSum)."""
    if op == _AVG and values.is_floating_point():
        wide = torch.float64 if values.dtype == torch.float64 else torch.float32
        return (values.to(wide) * torch.tensor(1.0 / nranks, dtype=wide)).to(values.dtype)
    return values.clone()


def _reduce_out(values: torch.Tensor, op: int, nranks: int) -> torch.Tensor:
    if op == _AVG and not values.is_floating_point():
        return values.div(nranks, rounding_mode="trunc")
    return values


def _run(fn: str, work: Callable[[], None], **fields: Any) -> None:
    """Run now, or at the outermost group end."""
    _log(fn, **fields)
    if _GROUP[0]:
        _GROUP[1].append(work)
    else:
        work()


def all_reduce(sendbuff: int, recvbuff: int, count: int, datatype: int, op: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        data = _reduce_in(_view(sendbuff, count, datatype), op, n)
        dist.all_reduce(data, op=getattr(dist.ReduceOp, _OPS[op]))
        _view(recvbuff, count, datatype).copy_(_reduce_out(data, op, n))
    _run("all_reduce", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count)


def reduce(sendbuff: int, recvbuff: int, count: int, datatype: int, op: int, root: int, comm: int,
           stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        data = _reduce_in(_view(sendbuff, count, datatype), op, n)
        dist.all_reduce(data, op=getattr(dist.ReduceOp, _OPS[op]))
        if rank == root:
            _view(recvbuff, count, datatype).copy_(_reduce_out(data, op, n))
    _run("reduce", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count, root=root)


def broadcast(sendbuff: int, recvbuff: int, count: int, datatype: int, root: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        data = _view(sendbuff, count, datatype).clone() if rank == root else torch.empty(count, dtype=_TYPES[datatype])
        dist.broadcast(data, src=root)
        _view(recvbuff, count, datatype).copy_(data)
    _run("broadcast", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count,
         root=root)


def all_gather(sendbuff: int, recvbuff: int, sendcount: int, datatype: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        out = torch.empty(sendcount * n, dtype=_TYPES[datatype])
        dist.all_gather_into_tensor(out, _view(sendbuff, sendcount, datatype).clone())
        _view(recvbuff, sendcount * n, datatype).copy_(out)
    _run("all_gather", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=sendcount)


def reduce_scatter(sendbuff: int, recvbuff: int, recvcount: int, datatype: int, op: int, comm: int,
                   stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        data = _reduce_in(_view(sendbuff, recvcount * n, datatype), op, n)
        dist.all_reduce(data, op=getattr(dist.ReduceOp, _OPS[op]))
        mine = data[rank * recvcount:(rank + 1) * recvcount]
        _view(recvbuff, recvcount, datatype).copy_(_reduce_out(mine, op, n))
    _run("reduce_scatter", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=recvcount)


def allto_all(sendbuff: int, recvbuff: int, count: int, datatype: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        out = torch.empty(count * n, dtype=_TYPES[datatype])
        dist.all_to_all_single(out, _view(sendbuff, count * n, datatype).clone())
        _view(recvbuff, count * n, datatype).copy_(out)
    _run("allto_all", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count)


def gather(sendbuff: int, recvbuff: int, count: int, datatype: int, root: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        out = torch.empty(count * n, dtype=_TYPES[datatype])
        dist.all_gather_into_tensor(out, _view(sendbuff, count, datatype).clone())
        if rank == root:
            _view(recvbuff, count * n, datatype).copy_(out)
    _run("gather", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count, root=root)


def scatter(sendbuff: int, recvbuff: int, count: int, datatype: int, root: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)

    def work() -> None:
        data = (_view(sendbuff, count * n, datatype).clone() if rank == root
                else torch.empty(count * n, dtype=_TYPES[datatype]))
        dist.broadcast(data, src=root)
        _view(recvbuff, count, datatype).copy_(data[rank * count:(rank + 1) * count])
    _run("scatter", work, nccl_mem=_nccl_mem(sendbuff, recvbuff), send=sendbuff, recv=recvbuff, count=count, root=root)


class _P2P:
    """One deferred ncclSend or ncclRecv: batched with its neighbours at the group's end."""

    def __init__(self, kind: str, ptr: int, count: int, datatype: int, peer: int, rank: int) -> None:
        self.kind, self.ptr, self.count, self.datatype, self.peer, self.rank = kind, ptr, count, datatype, peer, rank
        self.data = _view(ptr, count, datatype).clone() if kind == "send" else torch.empty(
            count, dtype=_TYPES[datatype])


def send(sendbuff: int, count: int, datatype: int, peer: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)
    _p2p("send", sendbuff, count, datatype, peer, rank, n)


def recv(recvbuff: int, count: int, datatype: int, peer: int, comm: int, stream: int) -> None:
    rank, n = _comm(comm)
    _p2p("recv", recvbuff, count, datatype, peer, rank, n)


def _p2p(kind: str, ptr: int, count: int, datatype: int, peer: int, rank: int, n: int) -> None:
    if not 0 <= peer < n:
        raise NCCLError(f"NCCL_INVALID_ARGUMENT: peer {peer} of {n} ranks")
    _log(kind, ptr=ptr, count=count, peer=peer, nccl_mem=_nccl_mem(ptr))
    op = _P2P(kind, ptr, count, datatype, peer, rank) if _GROUP[0] else None
    if op is None:  # outside a group: a group of one (NCCL blocks the same way)
        group_start()
        _GROUP[1].append(_P2P(kind, ptr, count, datatype, peer, rank))
        group_end()
    else:
        _GROUP[1].append(op)


def group_start() -> None:
    _GROUP[0] += 1
    _log("group_start")


def group_end() -> None:
    if _GROUP[0] == 0:
        raise NCCLError("NCCL_INVALID_USAGE: ncclGroupEnd without ncclGroupStart")
    _GROUP[0] -= 1
    _log("group_end")
    if _GROUP[0]:
        return
    deferred, _GROUP[1] = _GROUP[1], []
    batch: list[_P2P] = []
    for item in deferred + [None]:
        if isinstance(item, _P2P):
            batch.append(item)
            continue
        _exchange(batch)
        batch = []
        if item is not None:
            item()


def _exchange(batch: list[_P2P]) -> None:
    """Sends and receives of one group: to and from this rank locally, in order; the rest through gloo."""
    own_sends = [p for p in batch if p.kind == "send" and p.peer == p.rank]
    remote = []
    for p in batch:
        if p.peer == p.rank and p.kind == "recv":
            p.data.copy_(own_sends.pop(0).data)
        elif p.peer != p.rank:
            remote.append(dist.P2POp(dist.isend if p.kind == "send" else dist.irecv, p.data, p.peer))
    for work in dist.batch_isend_irecv(remote) if remote else []:
        work.wait()
    for p in batch:
        if p.kind == "recv":
            _view(p.ptr, p.count, p.datatype).copy_(p.data)
