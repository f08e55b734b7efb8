"""Xid events while gpuval runs, through NVML's event API (nvmlEventSetCreate + nvmlDeviceRegisterEvents with
nvmlEventTypeXidCriticalError, then nvmlEventSetWait): no privilege needed, unlike /dev/kmsg, and it sees the Xids
the suite's own load provokes. A thread waits on the event set until the watch ends."""

from __future__ import annotations

import threading
from typing import Any, Callable

from gpuval.node.machine import LogWindow, XidEvent
from gpuval.node.nvml import as_str, nvml_session, text_of
from gpuval.node.xid_lines import xids

_WAIT_MS = 500  # how long one wait blocks; the watch ends at most this late
_NO_INSTANCE = 0xFFFFFFFF  # nvmlEventData_t's gpuInstanceId / computeInstanceId when the event names no MIG slice


def _instance(value: Any) -> int | None:
    """A MIG instance id of an event, None where it names none (MIG off, or an nvidia-ml-py without the field)."""
    return None if value is None or int(value) == _NO_INSTANCE else int(value)


class NvmlXidWatch:
    """Collects NVML Xid events from `start()` to `stop()`; `kernel` (optional) reads the kernel log lines written
    since the start, whose Xids are added at `events()` (a driver too old for NVML events still logs them)."""

    def __init__(self, kernel: Callable[[], LogWindow] | None = None) -> None:
        self._kernel = kernel
        self._events: list[XidEvent] = []
        self._notes: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._set: Any = None

    def start(self) -> "NvmlXidWatch":
        """Register every GPU for Xid events; NoGpuDriver without NVML. A GPU that cannot be registered is noted."""
        self._session = nvml_session()
        nv = self._session.__enter__()
        try:
            self._set = nv.nvmlEventSetCreate()
            registered = 0
            for index in range(nv.nvmlDeviceGetCount()):
                try:
                    nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(index), nv.nvmlEventTypeXidCriticalError,
                                                self._set)
                    registered += 1
                except nv.NVMLError as exc:
                    self._notes.append(f"GPU {index}: no NVML Xid events ({text_of(exc)})")
        except nv.NVMLError as exc:
            self._notes.append(f"no NVML Xid events: {text_of(exc)}")
            return self
        if registered:
            self._thread = threading.Thread(target=self._wait, args=(nv,), name="gpuval-xid-events", daemon=True)
            self._thread.start()
        return self

    def _wait(self, nv: Any) -> None:
        try:
            self._poll(nv)
        except Exception as exc:  # noqa: BLE001 - a thread must not die silently: the check says what happened
            self._notes.append(f"the Xid event watch stopped: {type(exc).__name__}: {exc}")

    def _poll(self, nv: Any) -> None:
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(self._set, _WAIT_MS)
            except nv.NVMLError_Timeout:
                continue
            except nv.NVMLError as exc:
                self._notes.append(f"NVML stopped reporting events: {text_of(exc)}")
                return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            try:
                bus, index = as_str(nv.nvmlDeviceGetPciInfo(data.device).busId), nv.nvmlDeviceGetIndex(data.device)
            except nv.NVMLError:  # the GPU that raised it may be gone (Xid 79)
                bus, index = "", None
            self._events.append(XidEvent(int(data.eventData), bus, index, "nvml", "",
                                         _instance(getattr(data, "gpuInstanceId", None)),
                                         _instance(getattr(data, "computeInstanceId", None))))

    def stop(self) -> None:
        """End the watch: the thread, the event set, the NVML session."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=_WAIT_MS / 1000 * 4)
        if self._session is not None:
            import pynvml

            if self._set is not None:
                try:
                    pynvml.nvmlEventSetFree(self._set)
                except pynvml.NVMLError:
                    pass
            self._session.__exit__(None, None, None)
            self._session = None

    def events(self) -> list[XidEvent]:
        found = list(self._events)
        if self._kernel is not None:
            try:
                window = self._kernel()
            except Exception as exc:  # noqa: BLE001 - the kernel log is a second source; say why it was not read
                self._notes.append(f"kernel log not read: {exc}")
            else:
                found += [XidEvent(x.xid, x.pci, None, "kernel log", x.line.text) for x in xids(window.lines)]
        return found

    def notes(self) -> list[str]:
        return list(self._notes)
