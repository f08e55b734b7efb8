"""What NVML says of a GPU beyond its inventory basics (remap spare rows, throttle time, temperatures), what else
runs on it, and whether CUDA starts: plain data that a Machine (real or recorded) answers with."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MigDevice:
    """One MIG device of a GPU in MIG mode: its UUID (what CUDA_VISIBLE_DEVICES names it by) and the GPU and compute
    instance it is (NVML nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId on its handle: the GPU-I and
    GPU-CI the driver's Xid lines name); None where NVML did not say."""

    uuid: str
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass
class RemapHistogram:
    """Memory banks by the spare rows they have left for remapping (nvidia-smi -q "Bank Remap Availability
    Histogram", NVML nvmlDeviceGetRowRemapperHistogram): `max` all left ... `none` none left (the next row that
    fails there cannot be remapped)."""

    max: int = 0
    high: int = 0
    partial: int = 0
    low: int = 0
    none: int = 0


@dataclass
class ClockEventCounters:
    """Seconds each clock event reason held the clocks down since the driver loaded (nvidia-smi -q "Clocks Event
    Reasons Counters", NVML_FI_DEV_CLOCKS_EVENT_REASON_* fields); None where the driver does not count it."""

    sw_power_cap_s: float | None = None
    sync_boost_s: float | None = None
    sw_thermal_s: float | None = None
    hw_thermal_s: float | None = None
    hw_power_brake_s: float | None = None


@dataclass
class Temperatures:
    """Degrees C now, GPU and HBM (NVML_FI_DEV_MEMORY_TEMP), and the limits the driver slows down at (GPU) or
    that the memory may not pass (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, _MEM_MAX); None where not reported."""

    gpu_c: int | None = None
    memory_c: int | None = None
    gpu_slowdown_c: int | None = None
    memory_max_c: int | None = None


@dataclass
class GpuProcess:
    """A process other than gpuval's own on a GPU (NVML's compute, graphics and MPS client processes): its name from
    /proc where this process can see it ("" where not: another container's pid namespace, or pids NVML reports
    from the host's namespace while gpuval runs in its own). `kind`: compute, graphics (a display server or other
    graphics context), mps_server (nvidia-cuda-mps-server, which holds the GPU for its clients) or mps_client."""

    gpu: int
    pid: int
    name: str = ""
    used_memory_mib: int | None = None
    kind: str = "compute"


@dataclass
class GpuLoad:
    """One GPU's load over the sampled window: NVML's utilization (gpu: the share of time a kernel ran; memory: the
    share of time device memory was read or written, which copies alone raise too), PCIe traffic (MB/s, transmit
    and receive together), mean and lowest over the samples, and the device memory in use (MiB, the driver's
    reserve left out) when sampling began."""

    gpu_pct_mean: float = 0.0
    gpu_pct_min: int = 0
    memory_pct_mean: float | None = None
    memory_pct_min: int | None = None
    pcie_mb_s_mean: float | None = None
    pcie_mb_s_min: float | None = None
    memory_used_mib: int | None = None


@dataclass
class GpuActivity:
    """What else runs on the GPUs: other processes, and each GPU's load over about a second, by GPU index (a
    process in another container may be invisible, its load is not). `attributable` False: gpuval runs in a PID
    namespace of its own (a container without hostPID / --pid=host): NVML's pids are the host's, so none can be
    named here nor told from gpuval's own."""

    processes: list[GpuProcess] = field(default_factory=list)
    loads: dict[int, GpuLoad] = field(default_factory=dict)
    attributable: bool = True


@dataclass
class CudaStart:
    """Whether CUDA starts here (cuInit): its devices, or its error (code and text), and the variables that choose
    the devices it may see (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES) as they were set."""

    devices: int | None = None
    error_code: int | None = None
    error: str | None = None
    env: dict[str, str] = field(default_factory=dict)
