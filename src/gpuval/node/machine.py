"""What a machine is, behind one small interface: a real Linux host (NVML + sysfs) or a recorded description.

Checks, `gpuval topo` and `gpuval pin` read a `Machine` and never NVML or sysfs directly, so every check runs the
same code against a recorded ND96asr_v4 or ND96isr_H100_v5 in tests as against NVML on a GPU node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import datetime
from typing import Any, ContextManager, Protocol

from gpuval.errors import GpuvalError
from gpuval.node.fabric import FabricHealth, FabricInfo  # noqa: F401  (part of what a Machine answers)
from gpuval.node.imex import ImexHost
from gpuval.node.gpu_state import (  # noqa: F401  (part of what a Machine answers; imported from here too)
    ClockEventCounters, CudaStart, GpuActivity, GpuLoad, GpuProcess, MigDevice, RemapHistogram, Temperatures,
)


class HardwareUnavailable(GpuvalError):
    """The part of the machine asked about cannot be read here (no kernel log access, no sysfs entry)."""


class NoGpuDriver(HardwareUnavailable):
    """No NVIDIA driver (or NVML library) on this machine: GPU checks do not apply here."""


class NotRecorded(HardwareUnavailable):
    """A recorded machine says nothing about what was asked: the check is not judged (skipped), not an error."""


class ToolMissing(HardwareUnavailable):
    """A tool a check runs (ib_write_bw, dcgmi) is not installed here: the check does not apply (skipped)."""


@dataclass
class EccCounts:
    """ECC error counts of one GPU; None where the GPU does not report them."""

    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None
    # Ampere and later count SRAM (caches, register files) and DRAM (HBM) apart: nvidia-smi -q "SRAM Correctable",
    # "DRAM Uncorrectable"; NVML nvmlDeviceGetMemoryErrorCounter(..., NVML_MEMORY_LOCATION_SRAM / _DRAM)
    sram_volatile_corrected: int | None = None
    sram_volatile_uncorrected: int | None = None
    sram_aggregate_corrected: int | None = None
    sram_aggregate_uncorrected: int | None = None
    dram_volatile_corrected: int | None = None
    dram_volatile_uncorrected: int | None = None
    dram_aggregate_corrected: int | None = None
    dram_aggregate_uncorrected: int | None = None
    sram_threshold_exceeded: bool | None = None  # Hopper and later (R535+): nvidia-smi "SRAM Threshold Exceeded"


@dataclass
class PowerLimits:
    """Watts: the limit the driver enforces now, the board's default, and the range it may be set to."""

    enforced_w: float | None = None
    default_w: float | None = None
    min_w: float | None = None
    max_w: float | None = None


@dataclass
class NvlinkErrors:
    """Error counters of one NVLink since the driver loaded (nvidia-smi nvlink -e: Replay, Recovery, CRC)."""

    link: int
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None


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
    replays: int | None = None  # PCIe replays since the GPU's last reset (nvidia-smi "Replays Since Reset")


@dataclass
class Gpu:
    """One GPU as NVML describes it, plus its NUMA placement from sysfs.

    A lost GPU (`lost`: NVML cannot open it, e.g. GPU_IS_LOST after Xid 79) has only its index, its PCI bus id
    (from the driver's /proc listing) and `error`; every other field is unknown."""

    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""  # "00000001:00:00.0" as NVML prints it; "" when nothing could tell it
    # NVML nvmlDeviceGetPciInfo: pciDeviceId (device << 16 | vendor: 0x233510DE) and pciSubSystemId (0x18BF10DE),
    # what the GPU model is known by (gpuval.baselines.gpu_models); None where not read (an older recording)
    pci_device_id: int | None = None
    pci_subsystem_id: int | None = None
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
    mig_devices: list[MigDevice] = field(default_factory=list)  # its MIG devices, MIG on
    power: PowerLimits = field(default_factory=PowerLimits)
    nvlink_errors: list[NvlinkErrors] | None = None  # per link; None: not reported
    fabric: FabricInfo | None = None  # None: the driver says nothing about a fabric
    recovery_action: int | None = None  # NVML GPU recovery action (R550+): 0 none, 1 GPU reset, 2 node reboot ...
    remap_histogram: RemapHistogram | None = None  # None: not reported (before A100, or an old driver)
    unrepairable_memory: bool | None = None  # NVML (R575+): memory faults that no remap or repair can fix
    clock_event_counters: ClockEventCounters | None = None
    temperature: Temperatures = field(default_factory=Temperatures)
    inforom_valid: bool | None = None  # nvmlDeviceValidateInforom: the checksum of the inforom holds
    inforom_error: str | None = None  # NVML's words where it does not
    vbios: str | None = None
    compute_mode: str | None = None  # default | exclusive_process | prohibited
    virtualization: str | None = None  # none (bare metal) | pass_through | vgpu | host_vgpu | host_vsga
    aer: dict[str, dict[str, int]] | None = None  # sysfs aer_dev_{correctable,fatal,nonfatal}: name -> count
    # fields NVML could not read for another reason than "not supported" (e.g. no permission): field -> why
    unreadable: dict[str, str] = field(default_factory=dict)
    lost: bool = False
    error: str | None = None  # why NVML could not open the GPU (lost, or not this job's)

    @property
    def mig_uuids(self) -> list[str]:
        """The UUIDs of its MIG devices ("MIG-..."): what CUDA_VISIBLE_DEVICES names a MIG device by."""
        return [d.uuid for d in self.mig_devices]

    def __post_init__(self) -> None:
        """No figure that is not a finite number judges anything: NVML's reader and a recording's both build a Gpu
        here, so a NaN or infinite figure becomes None (unknown) and its field unreadable, which every check of that
        field says is ERROR, never judged as a figure."""
        for f in fields(self):
            if f.name == "unreadable":
                continue
            found: list[str] = []
            value = _finite_or_none(getattr(self, f.name), f.name, found)
            if found:
                setattr(self, f.name, value)
                for path in found:
                    key = _READ_AS.get(path.split(" ")[0], f.name)
                    self.unreadable.setdefault(key, f"{path}: not a finite figure, not judged")


_READ_AS = {"pcie.replays": "pcie_replays"}  # figures NVML's reader keeps apart from their parent field


def _finite_or_none(value: Any, path: str, found: list[str]) -> Any:
    """`value` with every figure in it that is not a finite number replaced by None; "PATH is FIGURE" of each
    added to `found`."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(f"{path} is {value}")
        return None
    if is_dataclass(value) and not isinstance(value, type):
        before = len(found)
        changes = {f.name: _finite_or_none(getattr(value, f.name), f"{path}.{f.name}", found) for f in fields(value)}
        return replace(value, **changes) if len(found) > before else value
    if isinstance(value, dict):
        return {k: _finite_or_none(v, f"{path}.{k}", found) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


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
    confidential_compute: bool | None = None  # NVML system CC feature on (copies to and from the host encrypted)


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
    counters: dict[str, int] = field(default_factory=dict)  # ports/<n>/counters: symbol_error, link_downed ...


@dataclass
class NumaNode:
    """A NUMA node and its CPUs; `cores`: its CPUs grouped by physical core (SMT siblings together), when known."""

    id: int
    cpus: list[int]
    cores: list[list[int]] | None = None


@dataclass(frozen=True)
class LogLine:
    """One line of a log (the kernel's, syslog's) and when it was written; `at` None where the source says not."""

    text: str
    at: datetime | None = None


@dataclass
class LogWindow:
    """The lines of a log since a moment, where they were read, and what could not be read on the way."""

    lines: list[LogLine]
    source: str  # /dev/kmsg, journalctl -k, /var/log/syslog, the recording
    since: datetime | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class XidEvent:
    """An Xid the driver reported while gpuval ran: through NVML's event API or a new kernel log line."""

    xid: int
    pci_bus_id: str = ""
    gpu: int | None = None
    source: str = "nvml"  # nvml | kernel log
    text: str = ""
    gpu_instance: int | None = None  # the MIG slice NVML attributes it to (nvmlEventData_t), None without one
    compute_instance: int | None = None


class XidWatch(Protocol):
    """Xid events from the moment a watch starts (NVML nvmlEventTypeXidCriticalError, new kernel log lines)."""

    def events(self) -> list[XidEvent]:
        """The events seen since the watch started."""

    def notes(self) -> list[str]:
        """What the watch could not see (no NVML events on this driver, a kernel log that cannot be read)."""


@dataclass
class FabricManager:
    """The NVIDIA fabric manager service (HGX NVSwitch systems): systemd's word on it and its version."""

    service: str | None  # systemd's state (active, inactive, failed ...); None: systemd cannot be asked here
    version: str | None = None  # nv-fabricmanager --version; None: not installed or not readable
    detail: str = ""


@dataclass
class ResourceLimits:
    """What NCCL needs of the process's environment: locked memory (RDMA registration) and /dev/shm (its SHM
    transport). None: unlimited memlock, or no /dev/shm at all."""

    memlock_bytes: int | None
    shm_bytes: int | None


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

    def now(self) -> datetime:
        """The machine's now (a recording's: the moment it was recorded), what log windows are counted back from."""

    def boot_time(self) -> datetime:
        """When the machine booted (wall clock)."""

    def kernel_messages(self, since: datetime | None) -> LogWindow:
        """Kernel log lines since `since` (all of this boot when None); HardwareUnavailable when no source reads."""

    def link_events(self, since: datetime) -> LogWindow:
        """Syslog lines about network links (carrier lost / gained) since `since`."""

    def watch_xids(self) -> ContextManager[XidWatch]:
        """Watch for Xid events from now until the context ends; NoGpuDriver without a driver."""

    def fabric_manager(self) -> FabricManager:
        """The fabric manager service and its version."""

    def imex(self) -> ImexHost:
        """IMEX on this node: its service, nvidia-imex-ctl's answers, the channel devices (node.imex)."""

    def cuda_attributes(self) -> dict[str, dict[str, int]]:
        """CUDA device attributes per GPU bus id (multicast_supported, dma_buf_supported, ...)."""

    def kernel_modules(self) -> set[str]:
        """Names of the loaded kernel modules."""

    def kernel_release(self) -> str:
        """The running kernel's release (uname -r)."""

    def resource_limits(self) -> ResourceLimits:
        """This process's locked-memory limit and the size of /dev/shm."""

    def tool(self, name: str) -> str | None:
        """Where a program is installed (ib_write_bw, dcgmi), None when it is not; what a check runs."""

    def perftest(self, program: str, hca: str, port: int, size: int, cuda_device: int | str | None,
                 numa_node: int | None) -> str:
        """The output of a perftest loopback run (server and client on this machine) through `hca`."""

    def dcgm_diag(self, level: int) -> str:
        """The JSON `dcgmi diag -r LEVEL -j` prints."""

    def cuda_start(self) -> CudaStart:
        """Whether CUDA starts here and sees devices, or CUDA's error (NoGpuDriver without libcuda)."""

    def gpu_activity(self, gpus: list[int]) -> GpuActivity:
        """Processes other than gpuval's own (this process and its children) on these GPUs (NVML indices), and
        their utilization sampled for about a second."""
