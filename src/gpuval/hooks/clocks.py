"""The step timer's clocks: the host's (time.perf_counter) off CUDA; CUDA events on the device's current stream on it
(marks on the GPU's timeline, read once they completed: one synchronisation per report), and which CUDA device a
rank times on with its PCI bus id."""

from __future__ import annotations

import sys
import time
from typing import Any


class HostClock:
    """time.perf_counter: what the host sees is what the rank does (CPU collectives block the host)."""

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed(self, a: float, b: float) -> float:
        return b - a

    def settle(self, mark: float) -> None:
        """Nothing to wait for."""


class CudaClock:
    """CUDA events on the device's current stream: marks on the GPU's timeline, read once they completed."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device

    def mark(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(self.torch.cuda.current_stream(self.device))
        return event

    def elapsed(self, a: Any, b: Any) -> float:
        """Seconds from mark `a` to mark `b`. A collective the process group runs on a stream of its own (FSDP's)
        is marked on that stream, which need not be done when the step's last mark is: wait for `b` first (at
        once where it is done), since CUDA refuses the time between events not yet complete."""
        b.synchronize()
        return a.elapsed_time(b) / 1000.0

    def settle(self, mark: Any) -> None:
        mark.synchronize()


def cuda_device(device: Any) -> Any | None:
    """The CUDA device to time on: `device` when it is one; with None, the current device where this process has
    already initialised CUDA (torch imported by the program, never by this function); else None (host clock)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_initialized() else None
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return None
    return torch.device("cuda", torch.cuda.current_device() if chosen.index is None else chosen.index)


def bus_id(torch: Any, index: int) -> str | None:
    """CUDA device `index`'s PCI bus id as gpuval writes it (`0000:19:00.0`); None where torch does not say."""
    props = torch.cuda.get_device_properties(index)
    parts = [getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device")]
    if any(p is None for p in parts):
        return None
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.0"
