"""NVML Xid events during a run, against the pynvml stand-in (tests/node/fake_nvml.py: NVML's real constants and
exception classes, nvmlEventSetWait raising NVML's real Timeout), plus the kernel log lines written meanwhile;
and the CUDA attribute reader on this machine (no libcuda here)."""

from __future__ import annotations

import time

import pytest

from gpuval.node.cuda_attrs import read_attributes
from gpuval.node.machine import LogLine, LogWindow, NoGpuDriver
from gpuval.node.nvml_events import NvmlXidWatch
from tests.node.fake_nvml import h100_node, install


def test_nvml_events_and_new_kernel_lines_are_both_reported(monkeypatch):
    fake = install(monkeypatch, h100_node())
    fake.event_queue = [(3, 79)]
    kernel = LogWindow([LogLine("NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008")],
                       "/dev/kmsg")
    watch = NvmlXidWatch(lambda: kernel).start()
    try:
        deadline = time.monotonic() + 5
        while not watch._events and time.monotonic() < deadline:
            time.sleep(0.05)
        events = watch.events()
    finally:
        watch.stop()
    assert [(e.xid, e.gpu, e.pci_bus_id, e.source) for e in events] == [
        (79, 3, "00000008:00:00.0", "nvml"), (43, None, "0000:00:05", "kernel log")]
    assert fake.registered == list(range(8)) and ("event_set_free", -1, ()) in fake.calls
    assert watch.notes() == []


def test_a_gpu_that_cannot_register_is_noted(monkeypatch):
    import pynvml

    install(monkeypatch, h100_node({6: {"errors": {"events": pynvml.NVML_ERROR_NOT_SUPPORTED}}}))
    watch = NvmlXidWatch().start()
    watch.stop()
    assert watch.notes() == ["GPU 6: no NVML Xid events (Not Supported)"]


def test_no_driver_here():
    with pytest.raises(NoGpuDriver):
        NvmlXidWatch().start()
    with pytest.raises(NoGpuDriver, match="libcuda.so.1"):
        read_attributes()
