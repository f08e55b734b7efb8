"""What else runs on the GPUs: NVML's compute, graphics and MPS client processes other than gpuval's own (this
process and its children), named from /proc where visible, and each GPU's load sampled for about a second:
utilization of the SMs and of device memory, PCIe traffic, memory in use (a process in another container may have
no pid this process can see; its load still shows, and a tenant that only copies shows in memory utilization and
PCIe traffic, not in SM utilization). The measuring checks ask before and after they measure
(workloads.health.busy); the sustained load's sampler asks while it runs (node.sampler, through `ProcessReader`).

NVML has no PID namespace support: in a container with a PID namespace of its own it reports host pids, which
/proc here cannot name and which may equal an unrelated pid of the container. `pid_namespace_is_hosts` tells;
where it is not, no pid is named or taken for gpuval's own (GpuActivity.attributable False).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from gpuval.node.gpu_state import GpuActivity, GpuLoad, GpuProcess
from gpuval.node.nvml import nvml_session
from gpuval.node.nvml_state import quiet

UTILIZATION_S = 1.2  # a little over NVML's longest utilization sample period (1 s): gpuval's own last kernels fade
UTILIZATION_STEP_S = 0.1
# The kernel's inode of the initial (host's) PID namespace, PROC_PID_INIT_INO (include/linux/proc_ns.h)
HOST_PID_NAMESPACE = "pid:[4026531836]"
# The MPS server's command; /proc/PID/comm holds at most 15 characters of it (TASK_COMM_LEN)
MPS_SERVER = ("nvidia-cuda-mps-server", "nvidia-cuda-mps")


def pid_namespace_is_hosts(proc: Path = Path("/proc")) -> bool | None:
    """Whether this process runs in the host's PID namespace (the one NVML reports pids in): its namespace is the
    initial one and /proc shows no outer pid for it (NSpid); None where neither can be read."""
    try:
        namespace = os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        namespace = None
    try:
        nspid = next((line.split()[1:] for line in (proc / "self" / "status").read_text().splitlines()
                      if line.startswith("NSpid:")), None)
    except OSError:
        nspid = None
    if namespace is None and nspid is None:
        return None
    return namespace in (None, HOST_PID_NAMESPACE) and (nspid is None or len(nspid) == 1)


def own_pids(proc: Path = Path("/proc")) -> set[int]:
    """This process and its descendants (copy workers, NCCL ranks): gpuval's own, never "another process"."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    mine = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew = bool(found)
        mine |= found
    return mine


def process_name(pid: int, proc: Path = Path("/proc")) -> str:
    """The process's command name from /proc, "" where it is not visible here (another pid namespace)."""
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


class ProcessReader:
    """Reads the processes on GPUs through an open NVML session, as this process can attribute them: with pids of
    its own namespace, gpuval's own left out and the others named from /proc; in a PID namespace of its own, every
    pid NVML lists (host pids), unnamed."""

    def __init__(self, nv: Any, proc: Path = Path("/proc")) -> None:
        self.nv, self.proc = nv, proc
        self.attributable = pid_namespace_is_hosts(proc) is not False
        self.mine = own_pids(proc) if self.attributable else set()

    def _listed(self, h: Any) -> list[tuple[str, Any]]:
        nv = self.nv
        return [(kind, p) for kind, call in (("mps_client", nv.nvmlDeviceGetMPSComputeRunningProcesses),
                                             ("compute", nv.nvmlDeviceGetComputeRunningProcesses),
                                             ("graphics", nv.nvmlDeviceGetGraphicsRunningProcesses))
                for p in quiet(lambda c=call: c(h)) or []]

    def read(self, index: int, h: Any) -> list[GpuProcess]:
        """The processes on one GPU other than gpuval's own (MPS clients first: a pid listed twice keeps its first
        kind)."""
        found: dict[int, GpuProcess] = {}
        for kind, p in self._listed(h):
            pid = int(p.pid)
            if pid in self.mine or pid in found:
                continue
            name = process_name(pid, self.proc) if self.attributable else ""
            used = getattr(p, "usedGpuMemory", None)  # None: not available (Windows WDDM, some containers)
            found[pid] = GpuProcess(index, pid, name, int(used) // 2**20 if isinstance(used, int) and used < 2**63
                                    else None, "mps_server" if kind == "compute" and name in MPS_SERVER else kind)
        return list(found.values())


class _Samples:
    """One GPU's readings over the window."""

    def __init__(self) -> None:
        self.gpu: list[int] = []
        self.memory: list[int] = []
        self.pcie: list[float] = []

    def read(self, nv: Any, h: Any) -> None:
        rates = quiet(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if rates is not None:
            self.gpu.append(int(rates.gpu))
            self.memory.append(int(rates.memory))
        tx = quiet(lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))
        rx = quiet(lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
        if tx is not None and rx is not None:  # KB/s over NVML's 20 ms window
            self.pcie.append((int(tx) + int(rx)) / 1000)

    def load(self, used_mib: int | None) -> GpuLoad:
        return GpuLoad(statistics.fmean(self.gpu) if self.gpu else 0.0, min(self.gpu, default=0),
                       statistics.fmean(self.memory) if self.memory else None, min(self.memory, default=None),
                       statistics.fmean(self.pcie) if self.pcie else None, min(self.pcie, default=None), used_mib)


def memory_used_mib(nv: Any, h: Any) -> int | None:
    """Device memory in use (MiB) with the driver's reserve left out (nvmlMemory_v2, R510+: what nvidia-smi -q
    prints as Used beside Reserved; an idle GPU reads 0-1 MiB); None where the driver cannot say it apart (the
    older count includes the reserve, hundreds of MiB on an idle GPU)."""
    info = quiet(lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2))
    return int(info.used) // 2**20 if info is not None else None


def gpu_activity(gpus: list[int], seconds: float = UTILIZATION_S, proc: Path = Path("/proc")) -> GpuActivity:
    """Other processes on these GPUs, and each GPU's load over `seconds` of samples (mean and lowest)."""
    with nvml_session() as nv:
        reader = ProcessReader(nv, proc)
        opened = {i: quiet(lambda i=i: nv.nvmlDeviceGetHandleByIndex(i)) for i in gpus}
        handles = {i: h for i, h in opened.items() if h is not None}  # a GPU lost meanwhile: gpu_count's to say
        processes = [p for i, h in handles.items() for p in reader.read(i, h)]
        used = {i: memory_used_mib(nv, h) for i, h in handles.items()}
        samples = {i: _Samples() for i in handles}
        deadline = time.monotonic() + seconds
        while True:
            for i, h in handles.items():
                samples[i].read(nv, h)
            if time.monotonic() >= deadline:
                break
            time.sleep(UTILIZATION_STEP_S)
    return GpuActivity(processes, {i: s.load(used[i]) for i, s in samples.items()}, reader.attributable)
