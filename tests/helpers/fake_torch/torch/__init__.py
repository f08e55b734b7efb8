"""A stand-in for torch (no GPU here): the parts of torch and torch.cuda the GPU measurer calls, answering from a
machine described in GPUVAL_FAKE_TORCH (JSON), with simulated time per GPU so every figure is known exactly.

Used in-process (tests put it in sys.modules) and by real child processes (tests put its folder first on
PYTHONPATH). Devices are listed in CUDA's own enumeration order, which need not be NVML's; CUDA_VISIBLE_DEVICES
narrows and reorders them by index or by "GPU-<uuid>", as CUDA does. A failing CUDA start-up raises RuntimeError
with CUDA's message, as torch.cuda.init() does. With "log" set, every pinned host allocation records the process's
CPU affinity and memory policy at that moment, and every host<->device copy its wall time.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import time
import types
from typing import Any

__version__ = "2.13.0+fake"
_CFG: dict[str, Any] = json.loads(os.environ.get("GPUVAL_FAKE_TORCH", "{}"))
version = types.SimpleNamespace(cuda=_CFG.get("cuda", "12.4"))


class dtype:  # noqa: N801  (torch's own name)
    def __init__(self, name: str, size: int) -> None:
        self.name, self.itemsize = name, size


uint8, int16, float16, bfloat16, float32 = (dtype("uint8", 1), dtype("int16", 2), dtype("float16", 2),
                                             dtype("bfloat16", 2), dtype("float32", 4))


def _visible() -> list[dict[str, Any]]:
    devices = list(_CFG.get("devices", []))
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is None:
        return devices
    out = []
    for item in (x.strip() for x in named.split(",") if x.strip()):
        match = [d for d in devices if "GPU-" + d["uuid"] == item] if item.startswith("GPU-") else \
            [devices[int(item)]] if item.isdigit() and int(item) < len(devices) else []
        if not match:
            break  # CUDA stops at the first entry it cannot use
        out += match
    return out


_DEV = _visible()
_CLOCK = [0.0] * len(_DEV)
_MATMULS = [0] * len(_DEV)
_CURRENT = [0]


def _log(entry: dict[str, Any]) -> None:
    if _CFG.get("log"):
        with open(_CFG["log"], "a") as out:
            out.write(json.dumps({"pid": os.getpid(), "wall": time.time(), **entry}) + "\n")


def _mempolicy() -> list[int]:
    """(mode, node mask) of this thread, by get_mempolicy(2) (x86_64)."""
    mode, mask = ctypes.c_int(0), (ctypes.c_ulong * 16)()
    ctypes.CDLL(None, use_errno=True).syscall(239, ctypes.byref(mode), mask, ctypes.c_ulong(1024), None, 0)
    return [mode.value, mask[0]]


_PTRS: dict[int, "Tensor"] = {}


class Tensor:
    def __init__(self, count: int, kind: dtype, device: int | None, pinned: bool = False, value: Any = 0) -> None:
        self.count, self.dtype, self.device, self.pinned, self.value = count, kind, device, pinned, value
        _PTRS[id(self)] = self

    def numel(self) -> int:
        return self.count

    def data_ptr(self) -> int:
        return id(self)

    def copy_(self, src: "Tensor", non_blocking: bool = False) -> "Tensor":
        nbytes = self.count * self.dtype.itemsize
        if self.device is not None and src.device is None:  # host to device: on the device's copy engine
            _advance(self.device, nbytes / (_DEV[self.device]["h2d"] * 1e9))
            _host_copy("h2d")
        elif self.device is None and src.device is not None:
            _advance(src.device, nbytes / (_DEV[src.device]["d2h"] * 1e9))
            _host_copy("d2h")
        elif self.device == src.device:  # device memcpy: read and write
            _advance(self.device, 2 * nbytes / (_DEV[self.device]["hbm"] * 1e9))
        else:  # torch's cross-device copy runs on the source GPU (a write into the peer)
            _advance(src.device, nbytes / (_peer(src.device, self.device) * 1e9))
        self.value = src.value
        return self

    def to(self, where: Any) -> "Tensor":
        if isinstance(where, dtype):
            return Tensor(self.count, where, self.device, value=self.value)
        return Tensor(self.count, self.dtype, _index(where), value=self.value)

    def view(self, kind: dtype) -> "Tensor":
        return self

    def cpu(self) -> "Tensor":
        return Tensor(self.count, self.dtype, None, value=self.value)

    def numpy(self) -> Any:
        return types.SimpleNamespace(tobytes=lambda: repr(self.value).encode())

    def sum(self) -> "Tensor":
        return self

    def item(self) -> Any:
        return self.value


def _peer(src: int, dst: int) -> float:
    peer = _DEV[src].get("peer", 300.0)
    return float(peer.get(_DEV[dst]["uuid"], peer.get("default", 300.0))) if isinstance(peer, dict) else float(peer)


def _host_copy(kind: str) -> None:
    if _CFG.get("log"):
        time.sleep(_CFG.get("copy_sleep", 0.0005))  # wall time passes, so concurrency can be seen in the log
        _log({"event": kind})


def _advance(device: int, seconds: float) -> None:
    _CLOCK[device] += seconds


def _index(device: Any) -> int | None:
    text = str(device)
    return None if text == "cpu" else int(text.split(":")[1]) if ":" in text else _CURRENT[0]


def empty(*shape: int, dtype: dtype = float32, device: Any = "cpu", pin_memory: bool = False) -> Tensor:
    count = 1
    for n in shape:
        count *= n
    if pin_memory:
        _log({"event": "pin", "affinity": sorted(os.sched_getaffinity(0)), "mempolicy": _mempolicy()})
    return Tensor(count, dtype, _index(device), pinned=pin_memory)


def ones(*shape: int, dtype: dtype = float32, device: Any = "cpu") -> Tensor:
    return empty(*shape, dtype=dtype, device=device)


def empty_like(t: Tensor) -> Tensor:
    return Tensor(t.count, t.dtype, t.device)


def randn(*shape: int, dtype: dtype = float32, device: Any = "cpu", generator: Any = None) -> Tensor:
    return empty(*shape, dtype=dtype, device=device)


class Generator:
    def manual_seed(self, seed: int) -> "Generator":
        return self


def matmul(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    d = a.device
    n = round(a.count ** 0.5)
    _advance(d, 2 * n**3 / (_DEV[d]["tflops"] * 1e12))
    _MATMULS[d] += 1
    wrong = _DEV[d].get("wrong_after")
    result = out or Tensor(a.count, a.dtype, d)
    result.value = 1 if wrong is not None and _MATMULS[d] > wrong else 0
    return result


def add(b: Tensor, c: Tensor, alpha: float = 1.0, out: Tensor | None = None) -> Tensor:
    _advance(b.device, 3 * b.count * b.dtype.itemsize / (_DEV[b.device]["hbm"] * 1e9))
    return out or Tensor(b.count, b.dtype, b.device)


def ne(a: Tensor, b: Tensor) -> Tensor:
    return Tensor(1, int16, a.device, value=int(a.value != b.value))


class _Cuda(types.ModuleType):
    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t = 0.0

        def record(self, stream: Any = None) -> None:
            self.t = _CLOCK[stream.device if stream is not None else _CURRENT[0]]

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: "_Cuda.Event") -> float:
            return (end.t - self.t) * 1e3

    @staticmethod
    def is_available() -> bool:
        return not _CFG.get("init_error") and bool(_DEV)

    @staticmethod
    def device_count() -> int:
        return 0 if _CFG.get("init_error") else len(_DEV)

    @staticmethod
    def init() -> None:
        if _CFG.get("init_error"):
            raise RuntimeError(_CFG["init_error"])

    @staticmethod
    def get_device_properties(i: int) -> Any:
        d = _DEV[i]
        domain, bus, rest = d["bus"].split(":")
        return types.SimpleNamespace(name=d.get("name", "NVIDIA H100 80GB HBM3"), pci_domain_id=int(domain, 16),
                                     pci_bus_id=int(bus, 16), pci_device_id=int(rest.split(".")[0], 16),
                                     uuid=d["uuid"])

    @staticmethod
    def set_device(i: Any) -> None:
        _CURRENT[0] = int(i)

    @staticmethod
    @contextlib.contextmanager
    def device(i: int) -> Any:
        before = _CURRENT[0]
        _CURRENT[0] = int(i)
        try:
            yield
        finally:
            _CURRENT[0] = before

    @staticmethod
    def synchronize(device: Any = None) -> None:
        pass

    @staticmethod
    def current_stream(device: Any = None) -> Any:
        index = _CURRENT[0] if device is None else int(device)
        return types.SimpleNamespace(device=index, cuda_stream=1000 + index)

    @staticmethod
    def can_device_access_peer(a: int, b: int) -> bool:
        return b not in _DEV[a].get("no_peer", [])


cuda = _Cuda("torch.cuda")


class FakeCudart:
    """The CUDA runtime's cudaMemcpyAsync (what the measurer calls through ctypes for GPU-to-GPU reads): the copy
    runs on the stream's GPU, pulling from the peer at that GPU's configured `read` rate."""

    def cudaMemcpyAsync(self, dst: int, src: int, count: int, kind: int, stream: int) -> int:  # noqa: N802
        reader, source = _PTRS[dst].device, _PTRS[src].device
        assert stream == 1000 + reader, "a read runs on the reading GPU's stream"
        read = _DEV[reader].get("read", 300.0)
        rate = read.get(_DEV[source]["uuid"], read.get("default", 300.0)) if isinstance(read, dict) else read
        _advance(reader, count / (float(rate) * 1e9))
        return 0
