"""Which GPUs this process may use, and which NVML GPU each CUDA device is, without importing torch.

CUDA numbers devices its own way (FASTEST_FIRST by default, then narrowed and reordered by CUDA_VISIBLE_DEVICES:
the NDv4 preset sets 2,1,7,5,3,0,6,4), NVML by PCI bus order. A figure measured on CUDA device i must be named by
the NVML index and PCI bus id of that GPU, so a slow "GPU 0" is the GPU NVML and the checks call GPU 0.
`nvml_gpus_of` maps CUDA devices to NVML GPUs by UUID (or PCI bus id), as torch.cuda.get_device_properties gives
them (`match_devices` against GPUs already read); `cuda_ids` reads both from such a properties object.

`pin_near` places the calling process beside a GPU before it allocates host memory (its CPUs, its NUMA node's
memory), as nvbandwidth does before its host<->device copies, so a copy measures the GPU's own PCIe path and not a
trip across sockets.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from typing import Any, Sequence

from gpuval.node.cpus import format_cpulist
from gpuval.node.nccl_topo import normalize_bus_id


def visible_gpu_count() -> int:
    """GPUs NVML sees, narrowed by CUDA_VISIBLE_DEVICES; 0 without a driver."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: no GPU for us
        return 0


@dataclass(frozen=True)
class NvmlGpu:
    """A GPU as NVML names it."""

    index: int
    pci_bus_id: str  # normalized: "0002:00:00.0"
    uuid: str  # "GPU-..." as NVML prints it

    def label(self) -> str:
        """How results name it: "GPU 2 (0002:00:00.0)"."""
        return f"GPU {self.index} ({self.pci_bus_id})"


def cuda_ids(props: Any) -> tuple[str | None, str | None]:
    """(PCI bus id, UUID) of a CUDA device from torch.cuda.get_device_properties(i): pci_domain_id, pci_bus_id and
    pci_device_id are numbers; uuid prints without NVML's "GPU-" prefix."""
    bus = None
    if getattr(props, "pci_bus_id", None) is not None:
        domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        bus = f"{domain:04x}:{props.pci_bus_id:02x}:{device:02x}.0"
    uuid = getattr(props, "uuid", None)
    return bus, (str(uuid) if uuid is not None else None)


def _uuid_key(uuid: str) -> str:
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def _nvml_gpus() -> list[NvmlGpu]:
    """Every GPU NVML can open here (lost and other jobs' GPUs have nothing to match)."""
    from gpuval.node.nvml import as_str, nvml_session

    found = []
    with nvml_session() as nv:
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(index)
                found.append(NvmlGpu(index, normalize_bus_id(as_str(nv.nvmlDeviceGetPciInfo(h).busId)),
                                     as_str(nv.nvmlDeviceGetUUID(h))))
            except nv.NVMLError:
                continue
    return found


def nvml_gpus_of(devices: list[tuple[str | None, str | None]]) -> list[NvmlGpu | None]:
    """For each CUDA device, given as (PCI bus id, UUID): the NVML GPU it is, matched by UUID first, else by bus
    id; None where neither matches (a MIG instance's UUID, a GPU NVML cannot open). NoGpuDriver without NVML."""
    return match_devices(devices, _nvml_gpus())


def match_devices(devices: list[tuple[str | None, str | None]], known: Sequence[NvmlGpu]) -> list[NvmlGpu | None]:
    """For each CUDA device (PCI bus id, UUID): the GPU of `known` it is, by UUID first, else by bus id."""
    by_uuid = {_uuid_key(g.uuid): g for g in known}
    by_bus = {g.pci_bus_id: g for g in known}
    out: list[NvmlGpu | None] = []
    for bus, uuid in devices:
        match = by_uuid.get(_uuid_key(uuid)) if uuid else None
        if match is None and bus:
            match = by_bus.get(normalize_bus_id(bus))
        out.append(match)
    return out


# ---- placing a process beside a GPU ---------------------------------------------------------------------------

MPOL_BIND = 2  # linux/mempolicy.h
# set_mempolicy(2): x86_64 and the generic table (aarch64) number it differently
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


def bind_memory(node: int) -> None:
    """Bind the calling thread's future memory allocations to NUMA `node` (MPOL_BIND); OSError when the kernel
    refuses or this architecture's syscall number is unknown."""
    number = _SET_MEMPOLICY.get(platform.machine())
    if number is None:
        raise OSError(f"set_mempolicy: syscall number unknown on {platform.machine()}")
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, MPOL_BIND, mask, ctypes.c_ulong(words * 64 + 1)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy(MPOL_BIND, node {node}): {os.strerror(err)}")


def pin_near(cpus: Sequence[int], numa_node: int | None) -> str:
    """Run this process on `cpus` (the GPU's local CPUs) and take its memory from `numa_node`, before anything
    allocates host memory; returns how it was placed, in words (what could not be done is said, never raised)."""
    said = []
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
            said.append(f"CPUs {format_cpulist(list(cpus))}")
        except OSError as exc:
            said.append(f"CPUs not pinned ({exc.strerror})")
    else:
        said.append("CPUs not pinned (the GPU's local CPUs are unknown)")
    if numa_node is None:
        said.append("memory not bound (the GPU's NUMA node is unknown)")
    else:
        try:
            bind_memory(numa_node)
            said.append(f"memory on NUMA {numa_node}")
        except OSError as exc:
            said.append(f"memory not bound ({exc})")
    return ", ".join(said)

