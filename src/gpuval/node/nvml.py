"""GPUs through NVML (nvidia-ml-py): the inventory checks judge, and the settings `gpuval tune` changes.

Every query that a GPU or driver does not support yields None instead of an error, so one old field never hides
the rest. Any other NVML error (no permission, unknown error, GPU lost) is not "not supported": the inventory keeps
it per GPU and field (`Gpu.unreadable`), so a check says "could not read" instead of judging a gap as a fault.
No driver at all is NoGpuDriver ("skipped: no NVIDIA driver"), never a traceback.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from gpuval.errors import GpuvalError
from gpuval.node.machine import Clocks, EccCounts, Gpu, GpuInventory, NoGpuDriver, PcieLink, RowRemap

T = TypeVar("T")


class NeedsRoot(GpuvalError):
    """NVML refused a change for lack of privileges."""


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
        raise NoGpuDriver(f"no NVIDIA driver: NVML says {_text(exc)}") from None
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


class NvmlReadError(GpuvalError):
    """NVML could not answer a query it supports (no permission, unknown error, GPU lost)."""


def _opt(call: Callable[[], T], what: str = "an NVML value", absent: tuple[type, ...] = ()) -> T | None:
    """The value, or None when this GPU or driver does not support the query (or raises one of `absent`);
    NvmlReadError on any other NVML error."""
    import pynvml

    try:
        return call()
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound, *absent):
        return None
    except pynvml.NVMLError as exc:
        raise NvmlReadError(f"could not read {what}: NVML says {_text(exc)}") from None


class _GpuReads:
    """The optional reads of one GPU: unsupported is None; another NVML error is None too, kept by field."""

    def __init__(self) -> None:
        self.unreadable: dict[str, str] = {}

    def get(self, field: str, call: Callable[[], T], absent: tuple[type, ...] = ()) -> T | None:
        try:
            return _opt(call, field.replace("_", " "), absent)
        except NvmlReadError as exc:
            self.unreadable.setdefault(field, str(exc))
            return None


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(nv: Any, index: int) -> Gpu:
    h = nv.nvmlDeviceGetHandleByIndex(index)
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
    return Gpu(
        index=index,
        name=_str(nv.nvmlDeviceGetName(h)),
        uuid=_str(nv.nvmlDeviceGetUUID(h)),
        pci_bus_id=_str(nv.nvmlDeviceGetPciInfo(h).busId),
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
        unreadable=r.unreadable,
    )


def read_inventory() -> GpuInventory:
    """Every GPU NVML sees, with the driver and CUDA versions."""
    with nvml_session() as nv:
        cuda = _opt(nv.nvmlSystemGetCudaDriverVersion_v2, "the CUDA driver version")
        return GpuInventory(
            driver_version=_str(nv.nvmlSystemGetDriverVersion()),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            gpus=[_gpu(nv, i) for i in range(nv.nvmlDeviceGetCount())],
        )


# ---- settings (gpuval tune) ------------------------------------------------------------------------------------


@dataclass
class ClockState:
    """Application clocks of one GPU before/after a change, with the highest the GPU supports."""

    index: int
    name: str
    sm_application: int | None
    mem_application: int | None
    sm_max: int | None
    mem_max: int | None
    persistence_mode: bool | None


def _change(nv: Any, what: str, call: Callable[[], Any]) -> None:
    try:
        call()
    except nv.NVMLError_NoPermission:
        raise NeedsRoot(f"{what} needs root: run it as root (sudo gpuval tune ...)") from None
    except nv.NVMLError_NotSupported:
        raise GpuvalError(f"{what}: this GPU or driver does not support it") from None
    except nv.NVMLError as exc:
        raise GpuvalError(f"{what} failed: NVML says {_text(exc)}") from None


def _state(nv: Any, index: int) -> ClockState:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    return ClockState(
        index=index, name=_str(nv.nvmlDeviceGetName(h)),
        sm_application=_opt(lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
        mem_application=_opt(lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM)),
        sm_max=_opt(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
        mem_max=_opt(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
        persistence_mode=_opt(lambda: nv.nvmlDeviceGetPersistenceMode(h) == nv.NVML_FEATURE_ENABLED),
    )


def _indices(nv: Any, gpus: list[int] | None) -> list[int]:
    count = nv.nvmlDeviceGetCount()
    chosen = list(range(count)) if not gpus else gpus
    bad = [g for g in chosen if not 0 <= g < count]
    if bad:
        raise GpuvalError(f"no GPU {bad[0]} here: this machine has {count} (0..{count - 1})")
    return chosen


def list_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Application and maximum clocks of each GPU."""
    with nvml_session() as nv:
        return [_state(nv, i) for i in _indices(nv, gpus)]


def set_max_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Set application clocks to the highest memory clock and the highest SM clock it supports."""
    with nvml_session() as nv:
        for i in _indices(nv, gpus):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = max(nv.nvmlDeviceGetSupportedMemoryClocks(h))
            sm = max(nv.nvmlDeviceGetSupportedGraphicsClocks(h, mem))
            _change(nv, f"setting GPU {i} application clocks to {mem},{sm} MHz",
                    lambda: nv.nvmlDeviceSetApplicationsClocks(h, mem, sm))
        return [_state(nv, i) for i in _indices(nv, gpus)]


def reset_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Put application clocks back to the driver's defaults."""
    with nvml_session() as nv:
        for i in _indices(nv, gpus):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            _change(nv, f"resetting GPU {i} application clocks", lambda: nv.nvmlDeviceResetApplicationsClocks(h))
        return [_state(nv, i) for i in _indices(nv, gpus)]


def set_persistence(enabled: bool, gpus: list[int] | None = None) -> list[ClockState]:
    """Turn persistence mode on or off (the driver stays loaded between jobs; settings survive)."""
    with nvml_session() as nv:
        mode = nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED
        for i in _indices(nv, gpus):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            _change(nv, f"turning GPU {i} persistence mode {'on' if enabled else 'off'}",
                    lambda: nv.nvmlDeviceSetPersistenceMode(h, mode))
        return [_state(nv, i) for i in _indices(nv, gpus)]
