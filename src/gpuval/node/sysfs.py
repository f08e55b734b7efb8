"""This Linux host read from sysfs, /proc, /dev and the kernel log, under an injectable root (tests point it at a
tree).

GPUs come from NVML (node.nvml); their NUMA node, local CPUs and PCI path come from sysfs here, or from the NCCL
topology file where sysfs does not say (NUMA node -1 in a VM). The driver's own list of the GPUs it bound
(/proc/driver/nvidia/gpus/<bus id>/information) names a GPU NVML can no longer open (GPU_IS_LOST after Xid 79).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Mapping

from gpuval.node import services
from gpuval.node.cpus import parse_cpulist
from gpuval.node.imex import ImexHost
from gpuval.node.kernel_log import boot_from_proc, in_window, read_files, read_journal, read_kmsg
from gpuval.node.machine import (
    CudaStart, FabricManager, GpuActivity, GpuInventory, HardwareUnavailable, IbPort, LogWindow, NumaNode,
    ResourceLimits, ToolMissing,
)
from gpuval.node.nccl_topo import NcclTopology, normalize_bus_id, read_topology
from gpuval.node.nvml_events import NvmlXidWatch

_RATE = re.compile(r"([\d.]+)\s*Gb/sec")
_STATE = re.compile(r"^\s*\d+:\s*(\S+)")  # "4: ACTIVE" -> ACTIVE, "5: LinkUp" -> LinkUp


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _counts(text: str | None) -> dict[str, int]:
    """`<name> <count>` lines (AER files: "RxErr 0" on current kernels, "Receiver Error 2" on older ones)."""
    found = {}
    for line in (text or "").splitlines():
        name, _, count = line.strip().rpartition(" ")
        if name and count.isdigit():
            found[name.strip()] = int(count)
    return found


_AER_FILES = {"correctable": "aer_dev_correctable", "fatal": "aer_dev_fatal", "nonfatal": "aer_dev_nonfatal"}
_SYSLOGS = ("var/log/syslog", "var/log/messages")
# what a container runtime mounts as a container's root (Docker, podman, containerd: overlay; older Docker: aufs;
# rootless podman: fuse-overlayfs); a VM or host boots from a disk file system
CONTAINER_ROOT_FS = ("overlay", "aufs", "fuse-overlayfs", "shiftfs", "tmpfs")


_DRIVER = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


class LinuxMachine:
    """The real host: NVML for GPUs, sysfs for NUMA, PCI and InfiniBand, /dev/kmsg for the kernel log; `env` names
    the NCCL topology file (NCCL_TOPO_FILE), as NCCL's own environment would."""

    def __init__(self, root: Path = Path("/"), env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.env = dict(os.environ) if env is None else env
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
        for node in nodes:
            node.cores = self._cores(node.cpus)
        return nodes

    def _cores(self, cpus: list[int]) -> list[list[int]] | None:
        """The CPUs grouped by physical core (topology/thread_siblings_list), in order of their first CPU; None
        when the kernel does not say."""
        groups: dict[int, list[int]] = {}
        mine = set(cpus)
        for cpu in cpus:
            text = _read(self._path(f"sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"))
            if text is None:
                return None
            siblings = [c for c in parse_cpulist(text) if c in mine] or [cpu]
            groups.setdefault(min(siblings), sorted(siblings))
        return [groups[first] for first in sorted(groups)]

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
                    pci_path=path, counters=self._port_counters(port),
                ))
        return ports

    @staticmethod
    def _port_counters(port: Path) -> dict[str, int]:
        counters = {}
        for entry in sorted((port / "counters").glob("*")):
            text = _read(entry)
            if text is not None and text.isdigit():
                counters[entry.name] = int(text)
        return counters

    def pci_aer(self, bus_id: str) -> dict[str, dict[str, int]] | None:
        """The AER counters the kernel keeps for a PCI device; None when it keeps none (no AER capability)."""
        dev = self._path("sys/bus/pci/devices", normalize_bus_id(bus_id))
        found = {kind: _counts(text) for kind, name in _AER_FILES.items()
                 if (text := _read(dev / name)) is not None}
        return found or None

    def rdma_device_files(self) -> list[str]:
        try:
            return sorted(p.name for p in self._path("dev/infiniband").iterdir())
        except OSError:
            return []

    def container_markers(self) -> list[str]:
        """What says this process runs in a container (where HCAs and /dev/infiniband may simply not be passed
        in): /.dockerenv or /run/.containerenv (podman) on a container's root file system, a container runtime in
        /proc/self/cgroup, a Kubernetes pod's environment. Empty on a host. A marker file on a disk root (ext4,
        xfs: a VM or host image built from a container image keeps its /.dockerenv) says nothing."""
        root_fs = self.root_fs_type()
        files = [f"/{name}" for name in (".dockerenv", "run/.containerenv") if self._path(name).exists()]
        found = [f"{f} (root file system {root_fs})" if root_fs else f for f in files
                 if root_fs is None or root_fs in CONTAINER_ROOT_FS]
        cgroup = _read(self._path("proc/self/cgroup")) or ""
        runtime = next((w for w in ("kubepods", "docker", "containerd", "libpod", "lxc") if w in cgroup), None)
        if runtime:
            found.append(f"/proc/self/cgroup names {runtime}")
        if self.env.get("KUBERNETES_SERVICE_HOST"):
            found.append("KUBERNETES_SERVICE_HOST is set (a Kubernetes pod)")
        return found

    def root_fs_type(self) -> str | None:
        """The file system type mounted at / (/proc/self/mountinfo: the last mount there is the one seen), None
        where it cannot be read."""
        found = None
        for line in (_read(self._path("proc/self/mountinfo")) or "").splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[4] == "/" and " - " in line:
                found = (line.split(" - ", 1)[1].split() or [None])[0]
        return found

    # ---- GPUs and kernel log -------------------------------------------------------------------------------------

    def gpu_inventory(self) -> GpuInventory:
        from gpuval.node.nvml import read_inventory

        inventory = read_inventory()
        self._name_lost(inventory)
        topo = self.nccl_topology()
        nodes = self.numa_nodes()
        for gpu in inventory.gpus + inventory.lost:
            if not gpu.pci_bus_id:
                continue
            numa, cpus, path = self.pci_device(gpu.pci_bus_id)
            placed = topo.device(gpu.pci_bus_id) if topo else None
            if numa is None and placed is not None and placed.numa_node is not None:
                numa, cpus = placed.numa_node, placed.cpus
                gpu.numa_source = f"{topo.source} (sysfs says -1)" if topo else None
            elif numa is None and len(nodes) == 1:  # one NUMA node: -1 cannot mean anything else
                numa, cpus = nodes[0].id, nodes[0].cpus
            gpu.numa_node = numa if numa is not None else gpu.numa_node
            gpu.cpus = cpus if numa is not None else []  # -1: local_cpulist lists every CPU, none is local
            gpu.pci_path = path
            gpu.aer = self.pci_aer(gpu.pci_bus_id)
        return inventory

    def driver_gpus(self) -> dict[str, dict[str, str]]:
        """Every GPU the NVIDIA driver bound, lost ones included: bus id -> the fields of its information file."""
        found = {}
        for entry in sorted(self._path("proc/driver/nvidia/gpus").glob("*")):
            text = _read(entry / "information") or ""
            fields = dict(re.findall(r"^([^:\n]+):\s*(.*?)\s*$", text, re.M))
            try:
                found[normalize_bus_id(fields.get("Bus Location") or entry.name)] = fields
            except ValueError:
                continue
        return found

    def _name_lost(self, inventory: GpuInventory) -> None:
        """Bus id, model and UUID of the GPUs NVML could not open, from the driver's list: NVML enumerates GPUs in
        PCI bus order, so the k-th bus id of the driver's list is GPU k when the GPUs that answer agree."""
        if not inventory.lost:
            return
        bound = self.driver_gpus()
        ids = sorted(bound)
        answering = {g.index: normalize_bus_id(g.pci_bus_id) for g in inventory.gpus}
        total = len(inventory.gpus) + len(inventory.lost) + len(inventory.not_ours)
        if len(ids) == total and all(ids[i] == bus for i, bus in answering.items() if i < len(ids)):
            chosen = {g.index: ids[g.index] for g in inventory.lost}
        else:
            spare = sorted(set(ids) - set(answering.values()))
            chosen = dict(zip((g.index for g in inventory.lost), spare)) if len(spare) == len(inventory.lost) else {}
        for gpu in inventory.lost:
            bus = chosen.get(gpu.index)
            if bus:
                gpu.pci_bus_id = bus
                gpu.name = bound[bus].get("Model", gpu.name)
                gpu.uuid = bound[bus].get("GPU UUID", gpu.uuid)

    def nvidia_driver(self) -> str | None:
        """The kernel driver's version from /proc/driver/nvidia/version; None when no NVIDIA driver is loaded."""
        text = _read(self._path("proc/driver/nvidia/version"))
        if text is None:
            return None
        match = _DRIVER.search(text)
        return match.group(1) if match else "unknown version"

    def nccl_topology(self) -> NcclTopology | None:
        """The NCCL topology file NCCL would read here (NCCL_TOPO_FILE, /etc/nccl.conf), None without one."""
        return read_topology(self.env, self.root)

    def kernel_log(self) -> list[str]:
        """The kernel ring buffer's lines, from /dev/kmsg (root, or kernel.dmesg_restrict=0)."""
        path = self._path("dev/kmsg")
        try:
            return [line.text for line in read_kmsg(path, None)]
        except HardwareUnavailable as exc:
            raise HardwareUnavailable(f"cannot read the kernel log {exc}") from None

    # ---- logs with times, events, services -----------------------------------------------------------------------

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def boot_time(self) -> datetime:
        return boot_from_proc(self.root)

    def _boot(self) -> datetime | None:
        try:
            return self.boot_time()
        except HardwareUnavailable:
            return None

    def kernel_messages(self, since: datetime | None) -> LogWindow:
        """The kernel log since `since`: /dev/kmsg, else `journalctl -k` (users of the adm / systemd-journal groups
        may read it where kernel.dmesg_restrict=1 closes /dev/kmsg, and in containers without /dev/kmsg)."""
        kmsg = self._path("dev/kmsg")
        try:
            return LogWindow(in_window(read_kmsg(kmsg, self._boot()), since), str(kmsg), since)
        except HardwareUnavailable as closed:
            try:
                lines = read_journal(since)
            except HardwareUnavailable as no_journal:
                raise HardwareUnavailable(f"cannot read the kernel log: {closed}; {no_journal}") from None
            return LogWindow(in_window(lines, since), "journalctl -k", since, [f"{closed}: read journalctl -k"])

    def link_events(self, since: datetime) -> LogWindow:
        """Carrier lost / gained lines since `since`: syslog files (what AzNHC's link-flap check reads), else the
        journal."""
        lines, read = read_files([self._path(p) for p in _SYSLOGS], since, contains="carrier")
        if read:
            return LogWindow(lines, ", ".join(read), since)
        try:
            found = read_journal(since, kernel=False, grep="carrier")
        except HardwareUnavailable as exc:
            raise HardwareUnavailable(f"no syslog file ({', '.join('/' + p for p in _SYSLOGS)}) and {exc}") from None
        return LogWindow(in_window(found, since), "journalctl", since)

    @contextlib.contextmanager
    def watch_xids(self) -> Iterator[NvmlXidWatch]:
        started = datetime.now(timezone.utc)
        watch = NvmlXidWatch(lambda: self.kernel_messages(started)).start()
        try:
            yield watch
        finally:
            watch.stop()

    def fabric_manager(self) -> FabricManager:
        return services.fabric_manager()

    def imex(self) -> ImexHost:
        return services.imex_host(self.root)

    def cuda_attributes(self) -> dict[str, dict[str, int]]:
        from gpuval.node.cuda_attrs import read_attributes

        return read_attributes()

    def cuda_start(self) -> CudaStart:
        from gpuval.node.cuda_attrs import start_cuda

        return start_cuda(self.env)

    def gpu_activity(self, gpus: list[int]) -> GpuActivity:
        from gpuval.node.nvml_activity import gpu_activity

        return gpu_activity(gpus)

    def kernel_modules(self) -> set[str]:
        return services.kernel_modules(self.root)

    def kernel_release(self) -> str:
        return services.kernel_release(self.root)

    def resource_limits(self) -> ResourceLimits:
        return services.resource_limits(self.root)

    def tool(self, name: str) -> str | None:
        return shutil.which(name)

    def _tool(self, name: str, what: str) -> str:
        exe = self.tool(name)
        if exe is None:
            raise ToolMissing(f"{name} is not installed on {self.description} ({what})")
        return exe

    def perftest(self, program: str, hca: str, port: int, size: int, cuda_device: int | str | None,
                 numa_node: int | None) -> str:
        from gpuval.node.perftest import run_loopback

        return run_loopback(self._tool(program, "perftest, linux-rdma/perftest"), hca, port, size, cuda_device,
                            numa_node)

    def dcgm_diag(self, level: int) -> str:
        from gpuval.node.dcgm import run_diag

        return run_diag(self._tool("dcgmi", "NVIDIA DCGM, datacenter-gpu-manager"), level)
