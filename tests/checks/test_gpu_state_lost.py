"""A GPU lost after Xid 79 on an 8 x H100 node: gpu_count fails naming its PCI bus id, xid shows the
Xid 79 line, and every other GPU check judges the 7 GPUs that answer: the suite fails (exit code 1), it is not
"could not run". Two stand-ins, both real-shaped: the live reader (LinuxMachine) over a sysfs/proc tree with a
pynvml that raises NVML's own GPU_IS_LOST, and a recorded node whose GPU entry says `lost: true`."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gpuval.checks.suite import all_checks, make_context, run_suite
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.health_support import H100, context, no_imds  # noqa: F401
from tests.node.fake_nvml import BUSES, h100_node, install

XID79 = "NVRM: Xid (PCI:0008:00:00): 79, pid=0, GPU has fallen off the bus."
GPU_CHECKS = ("driver", "ecc", "row_remap", "clock_throttle", "app_clocks", "persistence", "pcie_link", "nvlink")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    """/proc/driver/nvidia as the driver writes it (every bound GPU, lost ones too) and a kernel log with Xid 79."""
    root = tmp_path / "root"
    _write(root / "proc/driver/nvidia/version",
           "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
           "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    for minor, bus in enumerate(BUSES):
        bus_id = f"{bus.lower()}:00:00.0"
        _write(root / f"proc/driver/nvidia/gpus/{bus_id}/information",
               f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t GPU-5e7d{minor:04d}-0000\n"
               f"Video BIOS: \t 96.00.74.00.0c\nBus Type: \t PCIe\nBus Location: \t {bus_id}\n"
               f"Device Minor: \t {minor}\nGPU Excluded:\t No\n")
    _write(root / "dev/kmsg", f"3,1020,5162,-;{XID79}\n")
    _write(root / "sys/devices/system/node/node0/cpulist", "0-47")
    _write(root / "sys/devices/system/node/node1/cpulist", "48-95")
    return root


def _assert_lost_node(run, bus: str) -> None:
    by_name = {r.name: r for r in run.results}
    count = by_name["gpu_count"]
    assert count.status is Status.FAIL and f"GPU 3 at PCI {bus}" in count.reason and "is lost" in count.reason
    assert count.value == 7 and count.details["lost"] == [bus]
    xid = by_name["xid"]
    assert xid.status is Status.FAIL and "79" in xid.reason and "fallen off the bus" in xid.reason
    for name in GPU_CHECKS:
        assert by_name[name].status in (Status.PASS, Status.SKIPPED), by_name[name]
    assert "7 GPUs" in by_name["ecc"].reason and "each of 7 GPUs" in by_name["nvlink"].reason
    assert run.failed and not run.could_not_run


def test_live_reader_names_the_lost_gpu_from_the_driver_list(monkeypatch, node_root):
    install(monkeypatch, h100_node({3: {"errors": {"handle": pynvml.NVML_ERROR_GPU_IS_LOST}}}))
    machine = LinuxMachine(node_root, env={})
    inv = machine.gpu_inventory()
    [lost] = inv.lost
    assert (lost.index, lost.pci_bus_id, lost.name, lost.uuid) == (3, "0008:00:00.0", "NVIDIA H100 80GB HBM3",
                                                                    "GPU-5e7d0003-0000")
    assert machine.nvidia_driver() == "550.54.15"
    ctx = make_context(machine, H100)
    _assert_lost_node(run_suite(ctx, [c for c in all_checks() if c.name in ("gpu_count", "xid") + GPU_CHECKS]),
                      "0008:00:00.0")


def test_recorded_node_with_a_lost_gpu(monkeypatch):
    def lose_gpu_3(data):
        data["gpus"][3] = {"index": 3, "lost": True, "pci_bus_id": "0008:00:00.0"}
        data["kernel_log"] = [XID79]

    ctx = context(H100, lose_gpu_3)
    run = run_suite(ctx, [c for c in all_checks() if c.name in ("gpu_count", "xid") + GPU_CHECKS])
    _assert_lost_node(run, "0008:00:00.0")


def test_xid_needs_the_driver_not_nvml():
    """NVML cannot answer at all (every GPU check errors) but the driver is loaded: the Xid line is still read."""
    def nvml_broken(data):
        data["_unreadable"] = {"gpu_inventory": "NVML says Unknown Error"}
        data["kernel_log"] = [XID79]

    run = run_suite(context(H100, nvml_broken), [c for c in all_checks() if c.name in ("gpu_count", "xid")])
    assert [r.status for r in run.results] == [Status.ERROR, Status.FAIL]


def test_other_jobs_gpus_are_not_ours_and_do_not_fail_the_node(monkeypatch, node_root):
    """Slurm ConstrainDevices: NVML counts all 8 GPUs, 4 answer NO_PERMISSION. They are not this job's GPUs, and
    the node still has the 8 the SKU has."""
    install(monkeypatch, h100_node({i: {"errors": {"handle": pynvml.NVML_ERROR_NO_PERMISSION}} for i in (4, 5, 6, 7)}))
    ctx = make_context(LinuxMachine(node_root, env={}), H100)
    [count] = run_suite(ctx, [c for c in all_checks() if c.name == "gpu_count"]).results
    assert count.status is Status.PASS and count.value == 4 and "+4 not this job's" in count.reason
    assert len(ctx.inventory().gpus) == 4 and ctx.gpus_present() == 4


def test_mig_pending_warns(monkeypatch, node_root):
    install(monkeypatch, h100_node({2: {"mig": (0, 1)}, 5: {"mig": (1, 1)}}))
    [count] = run_suite(make_context(LinuxMachine(node_root, env={}), H100),
                        [c for c in all_checks() if c.name == "gpu_count"]).results
    assert count.status is Status.WARN and "GPU 2: MIG mode on is pending a GPU reset" in count.reason
    assert count.details["mig"] == [5]
