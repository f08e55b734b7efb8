"""node/: sysfs under an injected root, this machine's real sysfs, IMDS from a local server (tests/conftest.py's
imds_server), NVML's error classification, CPU lists."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpuval.checks.suite import all_checks, make_context, run_suite
from gpuval.errors import UsageError
from gpuval.node.cpus import cpu_mask, format_cpulist, parse_cpulist, parse_hex_mask
from gpuval.node.imds import detect_sku, imds_vm_size
from gpuval.node.machine import NoGpuDriver
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from gpuval.workloads.base import this_host
from tests.health_support import no_imds  # noqa: F401
from tests.node.sysfs_trees import abi_correctable_sample, aer_files, infiniband_tree


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.fixture
def ndv4_sysfs(tmp_path: Path) -> Path:
    """A sysfs tree laid out as the kernel does on ND96asr_v4 (two HCAs, four NUMA nodes, a kmsg file)."""
    root = tmp_path / "root"
    for node, cpus in enumerate(("0-23", "24-47", "48-71", "72-95")):
        _write(root / f"sys/devices/system/node/node{node}/cpulist", cpus)
    for hca, bus, numa, state, rate in (("mlx5_ib0", "0101:00:00.0", 1, "4: ACTIVE", "200 Gb/sec (4X HDR)"),
                                        ("mlx5_ib1", "0102:00:00.0", 1, "1: DOWN", "10 Gb/sec (4X SDR)")):
        dev = root / "sys/devices/LNXSYSTM:00/pci" / bus
        _write(dev / "numa_node", str(numa))
        _write(dev / "local_cpulist", "24-47")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(dev, root / "sys/bus/pci/devices" / bus)
        port = root / "sys/class/infiniband" / hca / "ports/1"
        _write(port / "state", state)
        _write(port / "phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled")
        _write(port / "rate", rate)
        _write(port / "link_layer", "InfiniBand")
        os.symlink(dev, root / "sys/class/infiniband" / hca / "device")
    (root / "dev/infiniband").mkdir(parents=True)
    (root / "dev/infiniband/uverbs0").write_text("")
    _write(root / "dev/kmsg", "6,1020,5162,-;NVRM: Xid (PCI:0001:00:00): 79, pid=0, GPU has fallen off the bus.")
    return root


def test_sysfs_reader_on_an_injected_tree(ndv4_sysfs: Path):
    m = LinuxMachine(ndv4_sysfs)
    assert [(n.id, n.cpus[0], n.cpus[-1]) for n in m.numa_nodes()] == [(0, 0, 23), (1, 24, 47), (2, 48, 71), (3, 72, 95)]
    ports = m.ib_ports()
    assert [(p.hca, p.state, p.rate_gbps, p.numa_node, p.pci_bus_id) for p in ports] == [
        ("mlx5_ib0", "ACTIVE", 200.0, 1, "0101:00:00.0"), ("mlx5_ib1", "DOWN", 10.0, 1, "0102:00:00.0")]
    assert m.rdma_device_files() == ["uverbs0"]
    assert m.kernel_log() == ["NVRM: Xid (PCI:0001:00:00): 79, pid=0, GPU has fallen off the bus."]
    assert m.pci_device("00000101:00:00.0")[:2] == (1, list(range(24, 48)))


def test_ib_ports_check_on_the_injected_tree(ndv4_sysfs: Path):
    ctx = make_context(LinuxMachine(ndv4_sysfs), "Standard_ND96asr_v4")
    result = next(c for c in all_checks() if c.name == "ib_ports").run(ctx)
    assert result.status is Status.FAIL and "mlx5_ib1 port 1 is DOWN" in result.reason


def test_this_machine_real_sysfs_skips_gpu_checks_without_traceback():
    """The real path: NVML finds no driver here, sysfs is this sandbox's own."""
    machine = LinuxMachine()
    with pytest.raises(NoGpuDriver):
        machine.gpu_inventory()
    nodes = machine.numa_nodes()
    assert nodes and all(n.cpus for n in nodes)
    run = run_suite(make_context(machine, None), all_checks())
    assert {r.status for r in run.results} <= {Status.SKIPPED, Status.PASS, Status.ERROR}
    # without HCAs the InfiniBand checks say so, dcgm_diag says how to ask for it; every other check: no driver
    no_hca = ("ib_ports", "ib_errors", "ib_write_bw")
    assert all(r.status is Status.SKIPPED and r.reason.endswith("on this machine (/sys/class/infiniband)") for r in run.results if r.name in no_hca)
    gpu_checks = [r for r in run.results if r.name not in (*no_hca, "dcgm_diag")]
    assert all(r.status is Status.SKIPPED and "no NVIDIA driver" in r.reason for r in gpu_checks)
    assert next(r for r in run.results if r.name == "dcgm_diag").reason.startswith("not asked: gpuval health --dcgm")
    where = this_host()
    assert where.gpu_count == 0 and where.gpu_model is None


def test_imds_from_a_local_server(imds_server):
    url = imds_server()
    assert imds_vm_size(url) == "Standard_ND96isr_H100_v5"
    assert detect_sku(None, url) == "Standard_ND96isr_H100_v5"
    assert detect_sku("Standard_ND96asr_v4", url) == "Standard_ND96asr_v4"  # --sku overrides


def test_imds_timeout_is_short_and_quiet(imds_server):
    url = imds_server(delay=3.0)
    start = time.monotonic()
    assert imds_vm_size(url, timeout=1.0) is None
    assert time.monotonic() - start < 2.5
    assert imds_vm_size("http://127.0.0.1:9/closed") is None


def test_nvml_not_supported_is_absent_other_errors_are_kept():
    """The classification of real nvidia-ml-py exceptions (NVML itself cannot run without a GPU): "not supported"
    reads as None, a permission or unknown error is kept per field so checks say "could not read"."""
    import pynvml

    from gpuval.node.nvml import NvmlReadError, _GpuReads
    from gpuval.node.nvml import optional as _opt

    def raising(code):
        def call():
            raise pynvml.NVMLError(code)
        return call

    assert _opt(raising(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert _opt(raising(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)) is None
    with pytest.raises(NvmlReadError, match="could not read NVLink state: NVML says Insufficient Permissions"):
        _opt(raising(pynvml.NVML_ERROR_NO_PERMISSION), "NVLink state")
    reads = _GpuReads()
    assert reads.get("nvlink_active", raising(pynvml.NVML_ERROR_INVALID_ARGUMENT),
                     (pynvml.NVMLError_InvalidArgument,)) is None
    assert reads.get("ecc", raising(pynvml.NVML_ERROR_NOT_SUPPORTED)) is None
    assert reads.unreadable == {}
    assert reads.get("nvlink_active", raising(pynvml.NVML_ERROR_UNKNOWN)) is None
    assert reads.unreadable == {"nvlink_active": "could not read nvlink active: NVML says Unknown Error"}


def test_cpu_lists_and_masks():
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_mask([0, 1, 4]) == "0x13"
    assert parse_hex_mask("00000000,0000ffff,ff000000") == list(range(24, 48))
    with pytest.raises(UsageError):
        parse_cpulist("0-x")


def test_container_markers_from_the_files_a_runtime_leaves(tmp_path: Path):
    """A container, where the HCAs may simply not be passed in. A host shows none of the markers."""
    assert LinuxMachine(tmp_path, env={}).container_markers() == []
    _write(tmp_path / ".dockerenv", "")
    _write(tmp_path / "proc/self/cgroup", "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-0f3a.scope")
    found = LinuxMachine(tmp_path, env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}).container_markers()
    assert found == ["/.dockerenv", "/proc/self/cgroup names kubepods", "KUBERNETES_SERVICE_HOST is set (a "
                     "Kubernetes pod)"]


def test_infiniband_counters_of_a_real_h100_tree(tmp_path: Path):
    """GPUd's /sys/class/infiniband of an H100 node: counters read per port; the RoCE bond is Ethernet."""
    ports = {p.hca: p for p in LinuxMachine(infiniband_tree(tmp_path)).ib_ports()}
    assert ports["mlx5_0"].rate_gbps == 400.0 and ports["mlx5_0"].link_layer == "InfiniBand"
    assert ports["mlx5_1"].counters["link_downed"] == 255  # 8-bit, saturated (edited by GPUd: see SOURCE.md)
    assert ports["mlx5_0"].counters["excessive_buffer_overrun_errors"] == 15
    assert ports["mlx5_0"].counters["port_rcv_data"] == 230539874932483
    assert ports["mlx5_bond_0"].link_layer == "Ethernet"


def test_aer_files_short_and_long_names(tmp_path: Path):
    root = tmp_path / "root"
    aer_files(root / "sys/bus/pci/devices/0000:0b:00.0")
    aer = LinuxMachine(root).pci_aer("00000000:0B:00.0")
    assert aer is not None and set(aer) == {"correctable", "fatal", "nonfatal"}
    assert aer["correctable"]["TOTAL_ERR_COR"] == 0 and aer["fatal"]["TOTAL_ERR_FATAL"] == 0 and "RxErr" in aer["correctable"]
    (root / "sys/bus/pci/devices/0000:0b:00.0/aer_dev_correctable").write_text(abi_correctable_sample())
    long_names = LinuxMachine(root).pci_aer("0000:0b:00.0")["correctable"]
    assert long_names["Receiver Error"] == 2 and long_names["TOTAL_ERR_COR"] == 2
    assert LinuxMachine(root).pci_aer("0000:0c:00.0") is None


def test_this_machine_pci_devices_report_aer_or_nothing():
    """This sandbox's real PCI devices: its virtual bus keeps no AER counters, which reads as None, not as zero."""
    devices = sorted(p.name for p in Path("/sys/bus/pci/devices").iterdir())
    assert devices
    found = [LinuxMachine().pci_aer(d) for d in devices]
    assert all(a is None or "correctable" in a for a in found)
