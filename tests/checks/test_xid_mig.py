"""Xids the driver attributes to a MIG slice (`NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:02): 95, ...`), read
everywhere the kernel log is read: the xid check, xid_during_run and a job's node events. The lines are NVIDIA's
published MIG example and lines built from the driver's format string (tests/data/kernel-log/SOURCE.md); the node
is the recorded ND96asr_v4 (A100 SXM4, which has MIG) with two of its GPUs moved to the lines' bus ids and given
MIG devices: their UUIDs are real ones (DataDog/datadog-agent#33120's `nvidia-smi -L`), their GPU and compute
instance ids set by the test, as NVML would answer them (no GPU here)."""

from __future__ import annotations

import time

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import run_suite
from gpuval.node.kernel_log import parse_line
from gpuval.node.machine import MigDevice
from gpuval.node.node_events import events_since
from gpuval.node.nvml import read_inventory
from gpuval.node.nvml_events import NvmlXidWatch
from gpuval.node.xid_lines import xids
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, context, gpu, machine, no_imds  # noqa: F401
from tests.node.fake_nvml import h100_node, install

LINES = (DATA / "kernel-log" / "mig-xid94-95.txt").read_text().splitlines()
SLICE_0 = "MIG-feb88891-0321-5fef-9c87-d4af3b54259e"  # GPU 0, GPU instance 5 (one compute instance, 0)
SLICE_3 = "MIG-a25704ba-3a06-5299-a795-fd7cf4d13973"  # GPU 3, GPU instance 5, compute instance 2


def mig_node(data):
    """GPU 0 at 0000:01:00 and GPU 3 at 0000:3b:00 (the lines' GPUs) in MIG mode, with the lines in the kernel log."""
    gpu(0, pci_bus_id="00000000:01:00.0", mig_current=True,
        mig_devices=[{"uuid": SLICE_0, "gpu_instance": 5, "compute_instance": 0}])(data)
    gpu(3, pci_bus_id="00000000:3B:00.0", mig_current=True,
        mig_devices=[{"uuid": "MIG-50f1c4c9-1508-5e8d-bb06-d08145b22e01", "gpu_instance": 3, "compute_instance": 0},
                     {"uuid": SLICE_3, "gpu_instance": 5, "compute_instance": 2}])(data)
    data["kernel_log"] = LINES


def run(name, ctx):
    [result] = run_suite(ctx, [REGISTRY[name]]).results
    return result


def test_mig_lines_are_read_with_their_gpu_and_compute_instance():
    found = xids([parse_line(raw) for raw in LINES])
    assert [(x.pci, x.xid, x.gi, x.ci) for x in found] == [
        ("0000:01:00", 94, 5, None), ("0000:3b:00", 13, 3, 0), ("0000:3b:00", 95, 5, 2), ("0000:3b:00", 154, None, None)]
    assert (found[3].recovery_action, found[3].recovery_text) == (1, "GPU Reset Required")
    # an NVLink 5 Xid in a slice still has its severity read after the slice (the format string's shape)
    [nvl5] = xids([parse_line("NVRM: Xid (PCI:0019:01:00 GPU-I:01 GPU-CI:00): 149, NETIR Fatal XC0 i0 Link -1")])
    assert (nvl5.gi, nvl5.ci, nvl5.severity) == (1, 0, "Fatal")


def test_a_mig_xid_95_fails_xid_naming_the_gpu_and_the_slice():
    result = run("xid", context(A100, mig_node))
    assert result.status is Status.FAIL and result.details["action"] == "reset-gpu"
    assert (f"Xid 95 (Uncontained memory error) on PCI 0000:3b:00 (GPU 3) in MIG slice GI 5 CI 2 ({SLICE_3}), 1 line: "
            "reset the GPU: the error was not contained to the slice, every slice's work stops [the later Xid 154 on "
            "this GPU: GPU Reset Required]") in result.reason
    found = {(x["xid"], x["gpu_instance"], x["compute_instance"]): x for x in result.details["xids"]}
    assert set(found) == {(94, 5, None), (13, 3, 0), (95, 5, 2), (154, None, None)}
    assert (found[(95, 5, 2)]["gpu"], found[(95, 5, 2)]["mig_uuid"]) == (3, SLICE_3)


def test_a_mig_xid_94_restarts_that_slices_work_by_the_catalog():
    only_94 = run("xid", context(A100, lambda d: (mig_node(d), d.update(kernel_log=LINES[:1]))))
    assert only_94.status is Status.WARN and only_94.details["action"] == "restart-app"
    assert only_94.reason.startswith(
        f"Xid 94 (Contained memory error) on PCI 0000:01:00 (GPU 0) in MIG slice GI 5 ({SLICE_0}), "
        "1 line: restart the work of that MIG slice; the other slices run on [catalog: RESTART_APP]")


def test_xid_during_run_reads_the_slice_from_nvml_and_from_the_kernel_log():
    """NVML's event names the GPU and the instances (nvmlEventData_t gpuInstanceId, computeInstanceId); a kernel
    log line read during the run names them in its text."""
    def during(data):
        mig_node(data)
        data["xid_events_during_run"] = [
            {"xid": 94, "gpu": 0, "pci_bus_id": "00000000:01:00.0", "gpu_instance": 5, "compute_instance": 0},
            {"xid": 95, "source": "kernel log", "pci_bus_id": "0000:3b:00", "text": LINES[2]}]

    ctx = context(A100, during)
    results = run_suite(ctx, [REGISTRY["xid_during_run"]]).results
    result = results[-1]
    assert result.status is Status.FAIL and result.details["action"] == "reset-gpu"
    found = {x["xid"]: (x["gpu"], x["gpu_instance"], x["compute_instance"], x["mig_uuid"])
             for x in result.details["xids"]}
    assert found == {94: (0, 5, 0, SLICE_0), 95: (3, 5, 2, SLICE_3)}


def test_a_jobs_node_events_hold_the_mig_xids():
    events = events_since(machine(A100, mig_node), None)
    assert [(e.code, e.pci) for e in events.events] == [(94, "0000:01:00"), (13, "0000:3b:00"), (95, "0000:3b:00"),
                                                       (154, "0000:3b:00")]
    assert [e.code for e in events.ecc] == [94, 95] and "GPU-I:05 GPU-CI:02" in events.events[2].text


def test_nvml_names_each_mig_devices_instances_and_each_events_slice(monkeypatch):
    """The inventory's MIG devices, and an Xid event's GPU and compute instance (nvmlEventData_t), as NVML answers
    them (tests/node/fake_nvml.py: pynvml's real errors; 0xFFFFFFFF where an event names no slice)."""
    fake = install(monkeypatch, h100_node({1: {"mig": (1, 1), "mig_uuids": [SLICE_0, SLICE_3],
                                        "mig_instances": [(5, 0)]}}))
    assert read_inventory().gpus[1].mig_devices == [MigDevice(SLICE_0, 5, 0), MigDevice(SLICE_3)]
    fake.event_queue = [(1, 94, 5, 0), (2, 79)]
    watch = NvmlXidWatch().start()
    try:
        deadline = time.monotonic() + 5
        while len(watch.events()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert [(e.xid, e.gpu, e.gpu_instance, e.compute_instance) for e in watch.events()] == [(94, 1, 5, 0),
                                                                                          (79, 2, None, None)]
