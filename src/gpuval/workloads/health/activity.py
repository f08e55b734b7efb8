"""Who else uses the GPUs, in words: the rules the measuring guard (workloads.health.busy) reads NVML's processes
and each GPU's load by.

- A GPU is loaded when, over about a second, its SM utilization, its memory utilization (copies alone raise it:
  a tenant that only moves data shows no SM time) or its PCIe traffic reaches a floor. Before a check the mean is
  read (gpuval is idle then, and a tenant pausing for data loading or a checkpoint is loaded part of the time);
  after a check the lowest reading (gpuval's own last kernels and copies fade within the window).
- A process is another job's when it is named here (this process sees its pid: the host's PID namespace), when it
  held a context at the guard's first read (before gpuval opened one: nothing there was gpuval's), or when its GPU
  is loaded. In a PID namespace of its own gpuval cannot name NVML's host pids nor tell its own from them: a pid
  new since the first read counts only while its GPU is loaded, and memory in use before gpuval opened a context
  that the processes listed do not account for is another job's.
- An MPS server (nvidia-cuda-mps-server) holds the GPU for its clients: the clients are the load, named with it;
  the server alone is said, not counted. A graphics process (Xorg, a desktop shell on an L4, L40S or A10 node)
  under a memory floor on an idle GPU shares it without loading it: a WARN, not busy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuval.node.machine import GpuActivity, GpuLoad, GpuProcess

BUSY_PCT = 10  # SM or memory utilization at or above this: a load (gpuval's own idle context reads 0)
# PCIe traffic at or above this (MB/s, both directions): copies. An idle H100 reads about 1 MB/s (nvidia-smi -q Tx/Rx
# Throughput 567/559 KB/s, tests/data/nvidia-smi/h100-565.57.01-thamada.txt); one pinned copy moves 20-55 GB/s.
PCIE_BUSY_MB_S = 500.0
# A display server's context: Xorg and a desktop shell hold tens of MiB (nvidia-smi's process list); a CUDA context
# alone takes hundreds (the lent H200: 874 MiB for a GEMM process, tests/data/nvml)
GRAPHICS_FLOOR_MIB = 256
UNLISTED_FLOOR_MIB = 256  # memory in use before gpuval's context that no listed process holds: a context
NAMESPACE_WORDS = ("processes cannot be attributed here: gpuval runs in a PID namespace of its own and NVML reports "
                   "host pids (run it with --pid=host, or hostPID: true in the pod)")


@dataclass
class Reading:
    """What one read of the GPUs' activity says: loads that make a figure a share of the GPU (busy), sharing under
    a floor (a WARN), and what is only said (notes)."""

    busy: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load_words(load: GpuLoad | None, before: bool) -> str | None:
    """The load signals at or over their floors, in words; None on an idle GPU."""
    if load is None:
        return None
    gpu = load.gpu_pct_mean if before else load.gpu_pct_min
    memory = load.memory_pct_mean if before else load.memory_pct_min
    pcie = load.pcie_mb_s_mean if before else load.pcie_mb_s_min
    parts = [f"{gpu:.0f}% utilized"] if gpu >= BUSY_PCT else []
    if memory is not None and memory >= BUSY_PCT:
        parts.append(f"memory {memory:.0f}% busy")
    if pcie is not None and pcie >= PCIE_BUSY_MB_S:
        parts.append(f"PCIe {pcie / 1000:.1f} GB/s")
    return ", ".join(parts) or None


def describe(p: GpuProcess, attributable: bool) -> str:
    """A process as the reasons name it: pid and name, or host pid where pids cannot be attributed; its memory."""
    who = (f"pid {p.pid} {p.name or '(not visible here: another container?)'}" if attributable
           else f"host pid {p.pid}")
    return who + (f" ({p.used_memory_mib} MiB)" if p.used_memory_mib is not None else "")


def _counts(p: GpuProcess, activity: GpuActivity, held: set[int], loaded: str | None) -> bool:
    return bool((activity.attributable and p.name) or p.pid in held or loaded)


def _gpu(activity: GpuActivity, gpu: int, before: bool, held: set[int], first: bool) -> Reading:
    """The reading of one GPU."""
    out = Reading()
    mine = [p for p in activity.processes if p.gpu == gpu]
    load = activity.loads.get(gpu)
    loaded = load_words(load, before)
    say = (lambda p: describe(p, activity.attributable))
    servers = [p for p in mine if p.kind == "mps_server"]
    clients = [p for p in mine if p.kind == "mps_client" and _counts(p, activity, held, loaded)]
    graphics = [p for p in mine if p.kind == "graphics"]
    others = [p for p in mine if p.kind == "compute" and _counts(p, activity, held, loaded)]
    if servers and clients:
        out.busy.append(f"GPU {gpu}: MPS server {', '.join(map(say, servers))} with clients "
                        f"{', '.join(map(say, clients))}")
    elif servers:
        out.notes.append(f"GPU {gpu}: an MPS server runs ({', '.join(map(say, servers))}), no client: measured "
                         "through it")
    out.busy += [f"GPU {gpu} used by {say(p)}" + (f", {loaded}" if loaded and not p.name else "")
                 for p in others + ([] if servers else clients)]
    light = [p for p in graphics if (p.used_memory_mib or 0) <= GRAPHICS_FLOOR_MIB and not loaded]
    out.shared += [f"GPU {gpu}: graphics process {say(p)}, a display server's footprint (under {GRAPHICS_FLOOR_MIB} "
                   "MiB, GPU idle): measured beside it" for p in light]
    out.busy += [f"GPU {gpu} used by graphics process {say(p)}" + (f", {loaded}" if loaded else "")
                 for p in graphics if p not in light]
    listed = sum(p.used_memory_mib or 0 for p in mine)
    if first and load is not None and load.memory_used_mib is not None \
            and load.memory_used_mib - listed >= UNLISTED_FLOOR_MIB:
        out.busy.append(f"GPU {gpu}: {load.memory_used_mib} MiB in use before gpuval opened a context, "
                        f"{load.memory_used_mib - listed} MiB more than the processes listed here hold")
    if loaded and not out.busy:
        out.busy.append(f"GPU {gpu} {loaded} by a process not visible here (another container?)")
    return out


def read_activity(activity: GpuActivity, before: bool, held: dict[int, set[int]], first: bool) -> Reading:
    """The reading of every GPU asked about: `before` a check (mean load) or after it (lowest); `held`: the pids
    listed at the guard's first read, per GPU; `first`: this is that read (gpuval holds no context yet)."""
    out = Reading()
    for gpu in sorted({p.gpu for p in activity.processes} | set(activity.loads)):
        one = _gpu(activity, gpu, before, held.get(gpu, set()), first)
        out.busy += one.busy
        out.shared += one.shared
        out.notes += one.notes
    if not activity.attributable:
        (out.busy if out.busy else out.notes).append(NAMESPACE_WORDS)
    return out
