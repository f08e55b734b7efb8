"""This Linux host read from sysfs, /dev and the kernel log, under an injectable root (tests point it at a tree).

GPUs come from NVML (node.nvml); their NUMA node, local CPUs and PCI path come from sysfs here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuval.node.cpus import parse_cpulist
from gpuval.node.machine import GpuInventory, HardwareUnavailable, IbPort, NumaNode

_RATE = re.compile(r"([\d.]+)\s*Gb/sec")
_STATE = re.compile(r"^\s*\d+:\s*(\S+)")  # "4: ACTIVE" -> ACTIVE, "5: LinkUp" -> LinkUp


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000001:00:00.0' and sysfs' '0001:00:00.0' -> '0001:00:00.0' (lower case)."""
    domain, rest = bus_id.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


class LinuxMachine:
    """The real host: NVML for GPUs, sysfs for NUMA, PCI and InfiniBand, /dev/kmsg for the kernel log."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.description = "this machine" if str(root) == "/" else f"the machine under {root}"

    def _path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    # ---- NUMA and PCI ------------------------------------------------------------------------------------------

    def numa_nodes(self) -> list[NumaNode]:
        base = self._path("sys/devices/system/node")
        nodes = []
        for entry in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
            cpus = _read(entry / "cpulist")
            if cpus is not None:
                nodes.append(NumaNode(id=int(entry.name[4:]), cpus=parse_cpulist(cpus)))
        if not nodes:  # kernels without NUMA support: one node with every online CPU
            online = _read(self._path("sys/devices/system/cpu/online"))
            nodes = [NumaNode(id=0, cpus=parse_cpulist(online) if online else sorted(os.sched_getaffinity(0)))]
        return nodes

    def pci_device(self, bus_id: str) -> tuple[int | None, list[int], list[str]]:
        """NUMA node, local CPUs and bridge path of a PCI device; (None, [], []) when sysfs does not list it."""
        dev = self._path("sys/bus/pci/devices", normalize_bus_id(bus_id))
        numa_text = _read(dev / "numa_node")
        numa = int(numa_text) if numa_text not in (None, "") else None
        if numa is not None and numa < 0:  # -1: the platform does not say
            numa = None
        cpus_text = _read(dev / "local_cpulist")
        try:
            real = dev.resolve(strict=True)
            path = [p for p in real.parent.parts if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$", p)
                    or p.startswith("pci")]
        except OSError:
            path = []
        return numa, parse_cpulist(cpus_text) if cpus_text else [], path

    # ---- InfiniBand ----------------------------------------------------------------------------------------------

    def ib_ports(self) -> list[IbPort]:
        ports = []
        for hca in sorted(self._path("sys/class/infiniband").glob("*")):
            bus_id = None
            device = hca / "device"
            try:
                bus_id = device.resolve(strict=True).name
            except OSError:
                pass
            numa, _, path = self.pci_device(bus_id) if bus_id and ":" in bus_id else (None, [], [])
            for port in sorted((hca / "ports").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else 0):
                rate = _RATE.search(_read(port / "rate") or "")
                state = _STATE.match(_read(port / "state") or "")
                phys = _STATE.match(_read(port / "phys_state") or "")
                ports.append(IbPort(
                    hca=hca.name, port=int(port.name), state=state.group(1) if state else "UNKNOWN",
                    phys_state=phys.group(1) if phys else "UNKNOWN",
                    rate_gbps=float(rate.group(1)) if rate else None,
                    link_layer=_read(port / "link_layer") or "UNKNOWN", pci_bus_id=bus_id, numa_node=numa,
                    pci_path=path,
                ))
        return ports

    def rdma_device_files(self) -> list[str]:
        try:
            return sorted(p.name for p in self._path("dev/infiniband").iterdir())
        except OSError:
            return []

    # ---- GPUs and kernel log -------------------------------------------------------------------------------------

    def gpu_inventory(self) -> GpuInventory:
        from gpuval.node.nvml import read_inventory

        inventory = read_inventory()
        for gpu in inventory.gpus:
            numa, cpus, path = self.pci_device(gpu.pci_bus_id)
            gpu.numa_node = numa if numa is not None else gpu.numa_node
            gpu.cpus = cpus or gpu.cpus
            gpu.pci_path = path
        return inventory

    def kernel_log(self) -> list[str]:
        """The kernel ring buffer, read without blocking from /dev/kmsg (root, or kernel.dmesg_restrict=0)."""
        path = self._path("dev/kmsg")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise HardwareUnavailable(f"cannot read the kernel log {path}: {exc.strerror}") from None
        lines: list[str] = []
        try:
            while True:
                try:
                    chunk = os.read(fd, 8192)
                except BlockingIOError:  # end of the ring buffer
                    break
                except OSError as exc:
                    if exc.errno == 32:  # EPIPE: the oldest record was overwritten while reading; go on
                        continue
                    raise HardwareUnavailable(f"cannot read the kernel log {path}: {exc.strerror}") from None
                if not chunk:
                    break
                # /dev/kmsg records are "prio,seq,usec,flags;message"; a plain file holds dmesg-like lines
                for raw in chunk.decode("utf-8", "replace").splitlines():
                    lines.append(raw.split(";", 1)[1] if re.match(r"^\d+,\d+,\d+,", raw) else raw)
        finally:
            os.close(fd)
        return lines
