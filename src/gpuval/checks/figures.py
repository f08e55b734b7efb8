"""What a measurer measures and the protocol every measurer follows: per-GPU figures, each naming its GPU by NVML
index and PCI bus id (never by CUDA ordinal: CUDA_VISIBLE_DEVICES and FASTEST_FIRST reorder those), the all_reduce
measurement, and `Measurer` typed with them (real: workloads.health.measurer.TorchMeasurer; recorded figures:
checks.measured.RecordedMeasurer; a quick run's: workloads.health.run.NoMeasurement).

Its own module, below checks.base (whose CheckContext holds a Measurer) and checks.measured (which asks it), so
neither imports the other to name these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from gpuval.node.machine import Gpu, GpuProcess


@dataclass(frozen=True)
class GpuRef:
    """A GPU to measure, as NVML and sysfs know it: what a figure is named by, and where its process is pinned."""

    index: int
    bus_id: str
    uuid: str = ""
    numa_node: int | None = None
    cpus: tuple[int, ...] = ()

    def label(self) -> str:
        """How every per-GPU figure names it: "GPU 2 (00000003:00:00.0)"."""
        return f"GPU {self.index} ({self.bus_id or 'bus id unknown'})"

    @classmethod
    def of(cls, gpu: Gpu) -> "GpuRef":
        return cls(gpu.index, gpu.pci_bus_id, gpu.uuid, gpu.numa_node, tuple(gpu.cpus))


def gpu_row(gpu: GpuRef, **figures: Any) -> dict[str, Any]:
    """One GPU's figures as every record stores them, once, in `details["gpus"]`: its NVML index, PCI bus id and
    label, then the figures (results.data.HealthData.per_gpu reads them back)."""
    return {"index": gpu.index, "bus_id": gpu.bus_id, "gpu": gpu.label(), **figures}


@dataclass
class CopyFigure:
    """Pinned host<->device copy bandwidth of one GPU (GB/s), from a process pinned to the GPU's NUMA node: alone,
    and while every GPU copies at once (None when not measured)."""

    gpu: GpuRef
    h2d: float
    d2h: float
    h2d_all: float | None = None
    d2h_all: float | None = None
    placed: str = ""  # how the measuring process was placed ("CPUs 0-23, memory on NUMA 1")


@dataclass
class PeerFigure:
    """Copy-engine bandwidth between two GPUs (GB/s): `read`, the copy run by `dst` reading from `src`
    (nvbandwidth device_to_device_memcpy_read_ce); `write`, run by `src` writing into `dst` (..._write_ce)."""

    src: GpuRef
    dst: GpuRef
    read: float | None
    write: float | None


@dataclass
class HbmFigure:
    """Device memory bandwidth of one GPU (GB/s): `memcpy`, a device-to-device cudaMemcpy (read + write counted,
    as CUDA's bandwidthTest D2D that SuperBench reports), and `triad`, a kernel a = b + s*c (three arrays counted,
    as BabelStream Triad)."""

    gpu: GpuRef
    memcpy: float | None
    triad: float | None = None


@dataclass
class LoadFigure:
    """One GPU under a sustained GEMM load: TFLOPS per window (median, lowest), what NVML sampled meanwhile, and
    results that differed from the GPU's own first result of the same input (silent corruption)."""

    gpu: GpuRef
    tflops: float
    tflops_min: float
    windows: int
    sm_mhz_median: float | None = None
    sm_mhz_min: int | None = None
    power_w_max: float | None = None
    temperature_c_max: int | None = None
    reasons_seen: list[str] = field(default_factory=list)
    mismatches: int = 0  # windows whose result differed from the first result of the same input
    checksum: str | None = None  # of the first result: GPUs of one model and library compute the same bits
    appeared: list[GpuProcess] = field(default_factory=list)  # processes that started on the GPU while it ran
    memory_temperature_c_max: int | None = None  # HBM


@dataclass
class LoadRun:
    """A sustained GEMM load: each GPU alone (one after the other), then all at once."""

    dtype: str
    seconds: float
    alone: list[LoadFigure]
    together: list[LoadFigure]


@dataclass(frozen=True)
class AllreduceMeasurement:
    """The best all_reduce bus bandwidth of several runs (each run's figure the mean of its out-of-place and
    in-place sides, as nccl-tests' Avg bus bandwidth over one size), the wrong elements counted over all of them,
    the ranks (one per GPU measured, named in `gpus`) and the NCCL_DEBUG log of the run when one was asked for."""

    busbw: float
    wrong: int = 0
    ranks: int = 0
    gpus: list[str] = field(default_factory=list)
    log: str | None = None


class Measurer(Protocol):
    """GPU benchmarks the measuring checks need: real (torch on CUDA) or recorded figures in tests. Each takes the
    GPUs to measure (GpuRef: NVML index, PCI bus id, UUID, NUMA node) and returns the figures above, each naming its
    GPU. A measurement that does not apply raises NotApplicable (skipped), one that could not run
    MeasurementUnavailable (error)."""

    def copy_bandwidth(self, gpus: list[GpuRef]) -> list[CopyFigure]:
        """Per GPU: pinned host<->device GB/s from its own NUMA node, alone and with every GPU copying at once."""

    def gemm_tflops(self, dtype: str, gpus: list[GpuRef]) -> list[tuple[GpuRef, float]]:
        """Per GPU: dense matrix multiply TFLOPS in `dtype` (bf16 or fp16), a short burst."""

    def gemm_load(self, dtype: str, gpus: list[GpuRef], seconds: float, alone: bool = True) -> LoadRun:
        """A sustained GEMM load (`seconds` per GPU alone unless `alone` is False, then on all at once), sampled
        through NVML."""

    def p2p_bandwidth(self, gpus: list[GpuRef]) -> list[PeerFigure]:
        """Copy-engine GB/s of every ordered pair of GPUs, read and write."""

    def hbm_bandwidth(self, gpus: list[GpuRef]) -> list[HbmFigure]:
        """Per GPU: device memory copy and triad GB/s."""

    def allreduce_busbw(self, size_bytes: int, gpus: list[GpuRef], repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        """Best bus bandwidth (GB/s) of all_reduce at `size_bytes`, one rank per GPU, of `repeats` runs."""

    def nccl_debug_log(self, gpus: list[GpuRef], env: Mapping[str, str]) -> str:
        """The NCCL_DEBUG=INFO output of a short NCCL run, one rank per GPU, with `env` set."""
