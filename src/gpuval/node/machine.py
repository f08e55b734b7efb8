"""What a machine is, behind one small interface: a real Linux host (NVML + sysfs) or a recorded description.

Checks, `gpuval topo` and `gpuval pin` read a `Machine` and never NVML or sysfs directly, so every check runs the
same code against a recorded ND96asr_v4 or ND96isr_H100_v5 in tests as against NVML on a GPU node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gpuval.errors import GpuvalError


class HardwareUnavailable(GpuvalError):
    """The part of the machine asked about cannot be read here (no kernel log access, no sysfs entry)."""


class NoGpuDriver(HardwareUnavailable):
    """No NVIDIA driver (or NVML library) on this machine: GPU checks do not apply here."""


@dataclass
class EccCounts:
    """ECC error counts of one GPU; None where the GPU does not report them."""

    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


@dataclass
class RowRemap:
    """Row remapping (A100 and later): rows remapped for correctable / uncorrectable errors, pending, failed."""

    corrected_rows: int = 0
    uncorrected_rows: int = 0
    pending: bool = False
    failure: bool = False


@dataclass
class Clocks:
    """MHz: current, application, the driver's default application clock and maximum, for SM and memory.

    On Pascal and later the default application clock does not cap the clock: the GPU boosts above it as power and
    temperature allow. Application clocks set *below* the default, or locked clocks, do cap it."""

    sm_current: int | None = None
    sm_application: int | None = None
    sm_max: int | None = None
    mem_current: int | None = None
    mem_application: int | None = None
    mem_max: int | None = None
    sm_default: int | None = None
    mem_default: int | None = None


@dataclass
class PcieLink:
    """PCIe generation and width, current (may drop at idle to save power) and maximum."""

    gen_current: int | None = None
    gen_max: int | None = None
    width_current: int | None = None
    width_max: int | None = None


@dataclass
class Gpu:
    """One GPU as NVML describes it, plus its NUMA placement from sysfs.

    A lost GPU (`lost`: NVML cannot open it, e.g. GPU_IS_LOST after Xid 79) has only its index, its PCI bus id
    (from the driver's /proc listing) and `error`; every other field is unknown."""

    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""  # "00000001:00:00.0" as NVML prints it; "" when nothing could tell it
    memory_total_mib: int | None = None
    ecc_enabled: bool | None = None
    ecc: EccCounts = field(default_factory=EccCounts)
    retired_pages: dict[str, int] | None = None  # V100: {"single_bit": n, "double_bit": n, "pending": 0|1}
    row_remap: RowRemap | None = None  # None: not supported (before A100)
    clocks: Clocks = field(default_factory=Clocks)
    throttle_reasons: int | None = None  # NVML clock event reasons bit mask
    persistence_mode: bool | None = None
    pcie: PcieLink = field(default_factory=PcieLink)
    nvlink_active: list[bool] | None = None  # one entry per link the GPU has; None: no NVLink
    numa_node: int | None = None
    numa_source: str | None = None  # where numa_node came from when sysfs could not say (NCCL_TOPO_FILE=...)
    cpus: list[int] = field(default_factory=list)  # CPUs local to the GPU
    pci_path: list[str] = field(default_factory=list)  # bridges from the root down, for "nearest NIC"
    mig_current: bool | None = None  # MIG mode on now; None: the GPU has no MIG
    mig_pending: bool | None = None  # MIG mode after the next GPU reset (differs from current: reset pending)
    # fields NVML could not read for another reason than "not supported" (e.g. no permission): field -> why
    unreadable: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    error: str | None = None  # why NVML could not open the GPU (lost, or not this job's)


@dataclass
class GpuInventory:
    """Every GPU of the machine with the driver that runs them.

    `gpus`: the GPUs that answer, which every check judges. `lost`: GPUs the driver bound but NVML cannot open
    (fallen off the bus, unknown error): a fault, never silently dropped. `not_ours`: GPUs NVML counts but this
    process may not open (NO_PERMISSION: another job's under Slurm ConstrainDevices or a container), never ours."""

    driver_version: str
    cuda_version: str | None
    gpus: list[Gpu]
    lost: list[Gpu] = field(default_factory=list)
    not_ours: list[Gpu] = field(default_factory=list)


@dataclass
class IbPort:
    """One port of an RDMA device (/sys/class/infiniband/<hca>/ports/<n>)."""

    hca: str
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED
    phys_state: str  # LinkUp, Disabled, Polling
    rate_gbps: float | None
    link_layer: str  # InfiniBand or Ethernet
    pci_bus_id: str | None = None
    numa_node: int | None = None
    pci_path: list[str] = field(default_factory=list)


@dataclass
class NumaNode:
    """A NUMA node and its CPUs; `cores`: its CPUs grouped by physical core (SMT siblings together), when known."""

    id: int
    cpus: list[int]
    cores: list[list[int]] | None = None


class Machine(Protocol):
    """What checks may ask of a machine. Each method raises HardwareUnavailable when it cannot be read."""

    description: str

    def gpu_inventory(self) -> GpuInventory:
        """GPUs and driver; NoGpuDriver without an NVIDIA driver."""

    def numa_nodes(self) -> list[NumaNode]:
        """NUMA nodes with their CPU lists."""

    def ib_ports(self) -> list[IbPort]:
        """Every port of every RDMA device (InfiniBand and RoCE); empty when there are none."""

    def rdma_device_files(self) -> list[str]:
        """Entries of /dev/infiniband (uverbs*, rdma_cm): what a container needs to use the HCAs."""

    def container_markers(self) -> list[str]:
        """What says this runs in a container (/.dockerenv, cgroups, a pod's environment); empty on a host."""

    def kernel_log(self) -> list[str]:
        """Kernel log lines (for Xid events); HardwareUnavailable when the log cannot be read."""

    def nvidia_driver(self) -> str | None:
        """The loaded NVIDIA kernel driver's version, None without one: whether there are Xids to look for, even
        when NVML cannot answer (a lost GPU)."""
