"""CPU pinning: a binding per local rank from the GPU / NUMA layout, rendered for each launcher, and a check of
the real affinity of running processes (/proc) against it.

A GPU whose NUMA node nobody knows (sysfs -1 in a VM, no NCCL topology file) is refused, never homed on node 0: on
a 4-NUMA node that would put every rank on one node. Ranks get whole physical cores (SMT siblings stay together).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuval.errors import UsageError
from gpuval.node.cpus import cpu_mask, format_cpulist, parse_cpulist
from gpuval.node.machine import GpuInventory, NumaNode

LAUNCHERS = ("mpirun", "srun", "torchrun", "numactl")


@dataclass
class RankBinding:
    """Local rank -> GPU, NUMA node and the CPUs it should run on."""

    local_rank: int
    gpu: int | None
    numa_node: int
    cpus: list[int]


def visible_gpu_order(value: str | None, gpus: int) -> list[int] | None:
    """CUDA_VISIBLE_DEVICES as GPU indexes (local rank r drives the r-th of them; unset: 0..gpus-1); None when it
    names GPUs another way (UUIDs, MIG) or out of range, where no plan can tell which GPU a rank drives."""
    if value is None:
        return list(range(gpus))
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not all(w.isdigit() and int(w) < gpus for w in words):
        return None
    return [int(w) for w in words]


def _home(gpu: int, node: int | None, numa: list[NumaNode]) -> int:
    """The NUMA node a GPU's rank runs on; a UsageError where it is not known, never a guess."""
    known = {n.id for n in numa}
    if node is None and len(numa) == 1:
        return numa[0].id
    if node is None:
        raise UsageError(f"GPU {gpu}'s NUMA node is unknown (sysfs says -1): set NCCL_TOPO_FILE to this node's NCCL "
                         "topology file, or plan from the SKU's recorded layout (--sku / --recorded)")
    if node not in known:
        raise UsageError(f"GPU {gpu} is on NUMA node {node}, which lists no CPUs here")
    return node


def plan_bindings(numa: list[NumaNode], gpu_numa: list[int | None], ranks: int,
                  gpu_order: list[int] | None = None) -> list[RankBinding]:
    """One binding per local rank: rank r drives GPU gpu_order[r] (default GPU r; when there are GPUs) and gets an
    equal share of the physical cores of that GPU's NUMA node, with their SMT siblings, never shared with another
    rank. Without GPUs, ranks are spread over the NUMA nodes."""
    if ranks < 1:
        raise UsageError(f"--ranks-per-node must be at least 1 (got {ranks})")
    nodes = {n.id: n for n in numa}
    if gpu_numa:
        order = list(range(len(gpu_numa))) if gpu_order is None else gpu_order
        if ranks > len(order):
            raise UsageError(f"{ranks} ranks but only {len(order)} GPUs: one rank per GPU at most")
        gpus: list[int | None] = list(order[:ranks])
        homes = [_home(g, gpu_numa[g], numa) for g in order[:ranks]]
    else:
        homes = [numa[r * len(numa) // ranks].id for r in range(ranks)]
        gpus = [None] * ranks
    bindings = []
    for node in sorted(set(homes)):
        members = [r for r in range(ranks) if homes[r] == node]
        cores = nodes[node].cores or [[c] for c in nodes[node].cpus]
        share = len(cores) // len(members)
        if share == 0:
            raise UsageError(f"NUMA node {node} has {len(cores)} cores for {len(members)} ranks: fewer ranks, please")
        for i, rank in enumerate(members):
            mine = sorted(c for core in cores[i * share:(i + 1) * share] for c in core)
            bindings.append(RankBinding(rank, gpus[rank], node, mine))
    return sorted(bindings, key=lambda b: b.local_rank)


def plan_notes(inventory: GpuInventory) -> list[str]:
    """What the plan took from elsewhere than sysfs, to print with it (e.g. NUMA nodes from NCCL_TOPO_FILE)."""
    return [f"GPU {g.index} NUMA node {g.numa_node} from {g.numa_source}" for g in inventory.gpus if g.numa_source]


def render(bindings: list[RankBinding], launcher: str, notes: list[str] | tuple[str, ...] = ()) -> str:
    """The launcher's binding syntax: an Open MPI rankfile, srun masks, numactl per rank, a torchrun wrapper;
    `notes` (plan_notes) first, as comments."""
    said = "".join(f"# {note}\n" for note in notes)
    return said + _render(bindings, launcher)


def _render(bindings: list[RankBinding], launcher: str) -> str:
    if launcher == "mpirun":
        lines = [f"rank {b.local_rank}=+n0 slot={format_cpulist(b.cpus)}" for b in bindings]
        # slot= numbers are hwloc's logical CPUs unless rmaps_rank_file_physical says they are the OS's
        return ("# rankfile (one node; repeat with +n1, +n2 ... for more), then:\n"
                f"#   mpirun -np {len(bindings)} --rankfile rankfile --mca rmaps_rank_file_physical 1 "
                "--report-bindings ...\n" + "\n".join(lines))
    if launcher == "srun":
        masks = ",".join(cpu_mask(b.cpus) for b in bindings)
        return f"srun --ntasks-per-node={len(bindings)} --cpu-bind=mask_cpu:{masks} ..."
    if launcher == "numactl":
        return "\n".join(f"# local rank {b.local_rank}" + (f" (GPU {b.gpu})" if b.gpu is not None else "") +
                         f"\nnumactl -N {b.numa_node} -m {b.numa_node} -C {format_cpulist(b.cpus)} <command>"
                         for b in bindings)
    if launcher == "torchrun":
        cases = "\n".join(f"  {b.local_rank}) exec numactl -N {b.numa_node} -m {b.numa_node} "
                          f"-C {format_cpulist(b.cpus)} \"$@\" ;;" for b in bindings)
        return ("# bind.sh: torchrun --nproc-per-node=%d --no-python ./bind.sh python train.py ...\n"
                "#!/bin/sh\ncase \"$LOCAL_RANK\" in\n%s\n  *) exec \"$@\" ;;\nesac" % (len(bindings), cases))
    raise UsageError(f"unknown launcher {launcher!r}: use {', '.join(LAUNCHERS)}")


# ---- checking running processes ---------------------------------------------------------------------------------


@dataclass
class ThreadAffinity:
    tid: int
    name: str
    cpus: list[int]


@dataclass
class ProcessAffinity:
    """A process's threads and their allowed CPUs, with the GPU it uses when that can be seen."""

    pid: int
    name: str
    threads: list[ThreadAffinity]
    gpu: int | None = None
    local_rank: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def cpus(self) -> list[int]:
        return sorted({c for t in self.threads for c in t.cpus})


def _status_field(text: str, key: str) -> str | None:
    m = re.search(rf"^{key}:\s*(.*)$", text, re.M)
    return m.group(1).strip() if m else None


LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID")


def _environ(base: Path) -> dict[str, str]:
    """The process's environment at start (/proc/PID/environ); empty when it is not ours to read."""
    try:
        raw = (base / "environ").read_text(errors="replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def process_gpu(env: dict[str, str], gpus: int) -> tuple[int | None, int | None]:
    """(local rank, GPU index) of a process from its environment: the launcher's local rank picks among the GPUs
    CUDA_VISIBLE_DEVICES shows it (one visible GPU is that GPU, whatever the rank). Open /dev/nvidiaN files say
    nothing: CUDA opens every visible device node."""
    local = next((env[k] for k in LOCAL_RANK_VARS if k in env), None)
    local_rank = int(local) if local is not None and local.strip().isdigit() else None
    order = visible_gpu_order(env.get("CUDA_VISIBLE_DEVICES"), gpus)
    if not order:
        return local_rank, None
    if len(order) == 1:
        return local_rank, order[0]
    if local_rank is not None and local_rank < len(order):
        return local_rank, order[local_rank]
    return local_rank, None


def read_process(pid: int, gpus: int, proc: Path = Path("/proc")) -> ProcessAffinity:
    """Each thread's allowed CPUs from /proc/PID/task/*/status; its local rank and GPU from /proc/PID/environ
    (`gpus`: how many GPUs the machine has, to read CUDA_VISIBLE_DEVICES)."""
    base = proc / str(pid)
    try:
        status = (base / "status").read_text()
    except OSError:
        raise UsageError(f"no process {pid} (or it is not readable)") from None
    threads = []
    for task in sorted((base / "task").glob("*"), key=lambda p: int(p.name)):
        try:
            text = (task / "status").read_text()
        except OSError:  # the thread ended while we looked
            continue
        threads.append(ThreadAffinity(int(task.name), _status_field(text, "Name") or "",
                                      parse_cpulist(_status_field(text, "Cpus_allowed_list") or "")))
    name = _status_field(status, "Name") or ""
    env = _environ(base)
    if (forked := re.fullmatch(r"gpuval-rank-(\d+)", name)) and "LOCAL_RANK" not in env:
        env["LOCAL_RANK"] = forked.group(1)  # a local gpuval rank set it after its starter's fork: its name says it
    local_rank, gpu = process_gpu(env, gpus)
    return ProcessAffinity(pid, name, threads, gpu, local_rank)


def check_processes(procs: list[ProcessAffinity], numa: list[NumaNode], gpu_numa: list[int | None]) -> None:
    """Add warnings: unbound processes, ranks on the wrong NUMA node for their GPU, ranks that share cores."""
    every = sorted({c for n in numa for c in n.cpus})
    node_of = {c: n.id for n in numa for c in n.cpus}
    for p in procs:
        cpus = p.cpus
        if len(procs) > 1 and set(every) <= set(cpus):
            p.warnings.append("not pinned: may run on any CPU of the machine")
        nodes = sorted({node_of[c] for c in cpus if c in node_of})
        if p.gpu is not None and p.gpu < len(gpu_numa) and gpu_numa[p.gpu] is not None:
            home = gpu_numa[p.gpu]
            away = [c for c in cpus if node_of.get(c) != home]
            if away:
                p.warnings.append(f"uses GPU {p.gpu} on NUMA node {home} but may run on NUMA node(s) "
                                  f"{[n for n in nodes if n != home]} (CPUs {format_cpulist(away)})")
    for i, a in enumerate(procs):
        for b in procs[i + 1:]:
            shared = set(a.cpus) & set(b.cpus)
            if shared and not (set(every) <= set(a.cpus) or set(every) <= set(b.cpus)):
                for p, other in ((a, b), (b, a)):
                    p.warnings.append(f"shares CPUs {format_cpulist(shared)} with pid {other.pid}")
