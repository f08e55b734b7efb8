"""GPUs through NVML (nvidia-ml-py): the inventory checks judge (settings `gpuval tune` changes: node.tuning).

Every query that a GPU or driver does not support yields None instead of an error, so one old field never hides
the rest. Any other NVML error (no permission, unknown error, GPU lost) is not "not supported": the inventory keeps
it per GPU and field (`Gpu.unreadable`), so a check says "could not read" instead of judging a gap as a fault.
Each GPU is opened on its own: one that NVML cannot open (GPU_IS_LOST after Xid 79, UNKNOWN) is kept as lost, one
this process may not open (NO_PERMISSION: another job's GPU) as not ours, and the others are read as usual.
No driver at all is NoGpuDriver ("skipped: no NVIDIA driver"), never a traceback.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, TypeVar

from gpuval.errors import GpuvalError
from gpuval.node.machine import Clocks, EccCounts, Gpu, GpuInventory, NoGpuDriver, PcieLink, RowRemap

T = TypeVar("T")


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """nvmlInit .. nvmlShutdown; NoGpuDriver when there is no driver or library."""
    try:
        import pynvml
    except ImportError:
        raise NoGpuDriver("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NoGpuDriver(f"no NVIDIA driver: NVML says {text_of(exc)}") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def text_of(exc: Exception) -> str:
    """NVML's message for an error (its class name when it has none)."""
    return str(exc) or type(exc).__name__


class NvmlReadError(GpuvalError):
    """NVML could not answer a query it supports (no permission, unknown error, GPU lost)."""


def optional(call: Callable[[], T], what: str = "an NVML value", absent: tuple[type, ...] = ()) -> T | None:
    """The value, or None when this GPU or driver does not support the query (or raises one of `absent`);
    NvmlReadError on any other NVML error."""
    import pynvml

    try:
        return call()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, *absent):
        return None
    except pynvml.NVMLError as exc:
        raise NvmlReadError(f"could not read {what}: NVML says {text_of(exc)}") from None


class _GpuReads:
    """The optional reads of one GPU: unsupported is None; another NVML error is None too, kept by field."""

    def __init__(self) -> None:
        self.unreadable: dict[str, str] = {}

    def get(self, field: str, call: Callable[[], T], absent: tuple[type, ...] = ()) -> T | None:
        try:
            return optional(call, field.replace("_", " "), absent)
        except NvmlReadError as exc:
            self.unreadable.setdefault(field, str(exc))
            return None


def as_str(value: Any) -> str:
    """NVML strings arrive as bytes from older nvidia-ml-py."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(nv: Any, index: int, h: Any) -> Gpu:
    r = _GpuReads()
    mem = r.get("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
    ecc_mode = r.get("ecc", lambda: nv.nvmlDeviceGetEccMode(h))

    def ecc(kind: int, counter: int) -> int | None:
        return r.get("ecc", lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, kind, counter)))

    remap = r.get("row_remap", lambda: nv.nvmlDeviceGetRemappedRows(h))  # (corrected, uncorrected, pending, failure)
    retired = None
    sbe = r.get("retired_pages", lambda: nv.nvmlDeviceGetRetiredPages(
        h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS))
    dbe = r.get("retired_pages", lambda: nv.nvmlDeviceGetRetiredPages(
        h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
    if sbe is not None or dbe is not None:
        pending = r.get("retired_pages", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
        retired = {"single_bit": len(sbe or []), "double_bit": len(dbe or []), "pending": int(pending or 0)}
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        # links are numbered from 0 with no gaps: the first unsupported (or out of range) one ends the list
        state = r.get("nvlink_active", lambda: nv.nvmlDeviceGetNvLinkState(h, link), (nv.NVMLError_InvalidArgument,))
        if state is None:
            break
        links.append(bool(state))
    throttle = r.get("throttle_reasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
    if throttle is None:  # older nvidia-ml-py or driver: the same mask under its old name
        throttle = r.get("throttle_reasons", lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    mig = r.get("mig", lambda: nv.nvmlDeviceGetMigMode(h))  # [current, pending]; not supported before A100
    return Gpu(
        index=index,
        name=as_str(nv.nvmlDeviceGetName(h)),
        uuid=as_str(nv.nvmlDeviceGetUUID(h)),
        pci_bus_id=as_str(nv.nvmlDeviceGetPciInfo(h).busId),
        memory_total_mib=int(mem.total) // 2**20 if mem else None,
        ecc_enabled=bool(ecc_mode[0]) if ecc_mode else None,
        ecc=EccCounts(
            volatile_corrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            volatile_uncorrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            aggregate_corrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
            aggregate_uncorrected=ecc(nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        ),
        retired_pages=retired,
        row_remap=RowRemap(int(remap[0]), int(remap[1]), bool(remap[2]), bool(remap[3])) if remap else None,
        clocks=Clocks(
            sm_current=r.get("clocks", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            sm_application=r.get("clocks", lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
            sm_max=r.get("clocks", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
            mem_current=r.get("clocks", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            mem_application=r.get("clocks", lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM)),
            mem_max=r.get("clocks", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
            sm_default=r.get("clocks", lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM)),
            mem_default=r.get("clocks", lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_MEM)),
        ),
        throttle_reasons=throttle,
        persistence_mode=r.get("persistence_mode",
                               lambda: nv.nvmlDeviceGetPersistenceMode(h) == nv.NVML_FEATURE_ENABLED),
        pcie=PcieLink(
            gen_current=r.get("pcie", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            gen_max=r.get("pcie", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            width_current=r.get("pcie", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
            width_max=r.get("pcie", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
        ),
        nvlink_active=links or None,
        mig_current=mig[0] == nv.NVML_DEVICE_MIG_ENABLE if mig else None,
        mig_pending=mig[1] == nv.NVML_DEVICE_MIG_ENABLE if mig else None,
        unreadable=r.unreadable,
    )


def _open(nv: Any, index: int, inventory: GpuInventory) -> None:
    """Read GPU `index` into the inventory: answering, lost, or not this process's."""
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        inventory.gpus.append(_gpu(nv, index, h))
    except nv.NVMLError_NoPermission as exc:
        inventory.not_ours.append(Gpu(index=index, error=f"NVML says {text_of(exc)}"))
    except nv.NVMLError as exc:  # GPU_IS_LOST, UNKNOWN ...: the driver bound it, NVML cannot use it
        inventory.lost.append(Gpu(index=index, lost=True, error=f"NVML says {text_of(exc)}"))


def read_inventory() -> GpuInventory:
    """Every GPU NVML counts, with the driver and CUDA versions; each GPU opened on its own."""
    with nvml_session() as nv:
        cuda = optional(nv.nvmlSystemGetCudaDriverVersion_v2, "the CUDA driver version")
        inventory = GpuInventory(driver_version=as_str(nv.nvmlSystemGetDriverVersion()),
                                 cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None, gpus=[])
        for index in range(nv.nvmlDeviceGetCount()):
            _open(nv, index, inventory)
        return inventory
