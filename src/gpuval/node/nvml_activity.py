"""What else runs on the GPUs: NVML's compute and graphics processes other than gpuval's own (this process and its
children), named from /proc where visible, and each GPU's utilization sampled for about a second (a process in
another container may have no pid this process can see; its load still shows). The measuring checks ask before
and after they measure (workloads.health.busy)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from gpuval.node.gpu_state import GpuActivity, GpuProcess
from gpuval.node.nvml import nvml_session
from gpuval.node.nvml_state import quiet

UTILIZATION_S = 1.2  # a little over NVML's longest utilization sample period (1 s): gpuval's own last kernels fade
UTILIZATION_STEP_S = 0.1


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


def _processes(nv: Any, index: int, h: Any, mine: set[int]) -> list[GpuProcess]:
    found: dict[int, GpuProcess] = {}
    for call in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
        for p in quiet(lambda c=call: c(h)) or []:
            pid = int(p.pid)
            if pid in mine or pid in found:
                continue
            used = getattr(p, "usedGpuMemory", None)  # None: not available (Windows WDDM, some containers)
            found[pid] = GpuProcess(index, pid, process_name(pid),
                                    int(used) // 2**20 if isinstance(used, int) and used < 2**63 else None)
    return list(found.values())


def gpu_activity(gpus: list[int], seconds: float = UTILIZATION_S) -> GpuActivity:
    """Other processes on these GPUs, and the lowest utilization each showed over `seconds` of samples."""
    mine = own_pids()
    with nvml_session() as nv:
        opened = {i: quiet(lambda i=i: nv.nvmlDeviceGetHandleByIndex(i)) for i in gpus}
        handles = {i: h for i, h in opened.items() if h is not None}  # a GPU lost meanwhile: gpu_count's to say
        processes = [p for i, h in handles.items() for p in _processes(nv, i, h, mine)]
        lowest: dict[int, int] = {}
        deadline = time.monotonic() + seconds
        while True:
            for i, h in handles.items():
                rates = quiet(lambda h=h: nv.nvmlDeviceGetUtilizationRates(h))
                if rates is not None:
                    lowest[i] = min(lowest.get(i, 100), int(rates.gpu))
            if time.monotonic() >= deadline:
                break
            time.sleep(UTILIZATION_STEP_S)
    return GpuActivity(processes, lowest)
