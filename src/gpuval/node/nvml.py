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
from gpuval.node.machine import (
    Clocks, EccCounts, FabricInfo, Gpu, GpuInventory, MigDevice, NoGpuDriver, NvlinkErrors, PcieLink, PowerLimits,
    RowRemap,
)
from gpuval.node.fabric import decode_health, uuid_of
from gpuval.node.nvml_state import confidential_compute, gpu_state

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


_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
_NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # NVML_NVLINK_ERROR_DL_REPLAY .. _CRC_DATA


def _ecc(nv: Any, h: Any, r: _GpuReads) -> EccCounts:
    """Uncorrected/corrected totals (volatile: since driver load, aggregate: lifetime), and SRAM/DRAM apart where
    the GPU counts them so (Ampere and later: NVML_MEMORY_LOCATION_SRAM / _DRAM)."""
    def total(kind: int, counter: int) -> int | None:
        return r.get("ecc", lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, kind, counter)))

    def located(kind: int, counter: int, where: int) -> int | None:
        # unsupported locations are None: Volta counts per cache/device memory, not SRAM/DRAM
        return optional(lambda: int(nv.nvmlDeviceGetMemoryErrorCounter(h, kind, counter, where)), "",
                        (nv.NVMLError,))

    cor, unc = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
    sram, dram = nv.NVML_MEMORY_LOCATION_SRAM, nv.NVML_MEMORY_LOCATION_DRAM
    counts = EccCounts(total(cor, vol), total(unc, vol), total(cor, agg), total(unc, agg),
                       located(cor, vol, sram), located(unc, vol, sram), located(cor, agg, sram),
                       located(unc, agg, sram), located(cor, vol, dram), located(unc, vol, dram),
                       located(cor, agg, dram), located(unc, agg, dram))
    status_type = getattr(nv, "c_nvmlEccSramErrorStatus_v1_t", None)
    if status_type is not None:  # R535+: whether the SRAM error threshold was crossed
        status = status_type()
        if optional(lambda: nv.nvmlDeviceGetSramEccErrorStatus(h, nv.byref(status)), "", (nv.NVMLError,
                                                                                           AttributeError)) is not None:
            counts.sram_threshold_exceeded = bool(status.bThresholdExceeded)
    return counts


def _fabric_struct(nv: Any, h: Any, r: _GpuReads) -> Any:
    """The newest fabric info this driver answers: v4 (cliques, health mask and summary), v3 (health summary),
    v2 (health mask, R550) through nvmlDeviceGetGpuFabricInfoV, else v1; None where it has none."""
    absent = (nv.NVMLError, AttributeError)
    if hasattr(nv, "c_nvmlGpuFabricInfo_v4_t"):
        info = nv.c_nvmlGpuFabricInfo_v4_t()
        if optional(lambda: nv.nvmlDeviceGetGpuFabricInfo_v4(h, nv.byref(info)), "", absent) is not None:
            return info
    for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfoV_t"):
        if hasattr(nv, name):
            info = getattr(nv, name)()
            if optional(lambda: nv.nvmlDeviceGetGpuFabricInfoV(h, nv.byref(info)), "", absent) is not None:
                return info
    info = nv.c_nvmlGpuFabricInfo_t()
    return info if r.get("fabric", lambda: nv.nvmlDeviceGetGpuFabricInfo(h, nv.byref(info)),
                          (AttributeError,)) is not None else None


def _clique(info: Any) -> int:
    """The clique id: v1-v3's cliqueId, v4's unicast-pointer clique (NVML_GPU_FABRIC_CLIQUE_TYPE_UNICAST_POINTER)."""
    if hasattr(info, "cliqueId"):
        return int(info.cliqueId)
    found = [c.id for c in info.cliques[:int(info.numCliques)] if int(c.type) == 0]
    return int(found[0]) if found else 0


def _fabric(nv: Any, h: Any, r: _GpuReads) -> FabricInfo | None:
    """The GPU's NVLink fabric registration (Hopper and later), with the health the driver decodes (node.fabric)."""
    info = _fabric_struct(nv, h, r)
    if info is None:
        return None
    state = _FABRIC_STATES.get(int(info.state), f"state {int(info.state)}")
    if state == "not_supported":
        return FabricInfo(state)
    status = "success" if int(info.status) == nv.NVML_SUCCESS else text_of(nv.NVMLError(int(info.status)))
    health = decode_health(getattr(info, "healthMask", None), getattr(info, "healthSummary", None))
    return FabricInfo(state, status, _clique(info), uuid_of(info.clusterUuid), health)


def _nvlink_errors(nv: Any, h: Any, r: _GpuReads, links: list[bool]) -> list[NvlinkErrors] | None:
    """Error counters of the active links (a link that is down has its own verdict: the nvlink check's)."""
    found = []
    for link in (i for i, up in enumerate(links) if up):
        values = [r.get("nvlink_errors", lambda c=c: int(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, c)))
                  for c in range(len(_NVLINK_COUNTERS))]
        if any(v is not None for v in values):
            found.append(NvlinkErrors(link, *values))
    return found or None


def _power(nv: Any, h: Any, r: _GpuReads) -> PowerLimits:
    def watts(call: Any) -> float | None:
        value = r.get("power", call)
        return value / 1000.0 if value is not None else None  # NVML answers in milliwatts

    constraints = r.get("power", lambda: nv.nvmlDeviceGetPowerManagementLimitConstraints(h))
    return PowerLimits(enforced_w=watts(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h)),
                       default_w=watts(lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h)),
                       min_w=constraints[0] / 1000.0 if constraints else None,
                       max_w=constraints[1] / 1000.0 if constraints else None)


def _recovery_action(nv: Any, h: Any) -> int | None:
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R550+), None where the driver does not have it."""
    field_id = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field_id is None:
        return None
    values = optional(lambda: nv.nvmlDeviceGetFieldValues(h, [field_id]), "", (nv.NVMLError,))
    if not values or int(values[0].nvmlReturn) != nv.NVML_SUCCESS:
        return None
    return int(values[0].value.uiVal)


def _mig_devices(nv: Any, h: Any) -> list[MigDevice]:
    """The GPU's MIG devices: UUID (what CUDA_VISIBLE_DEVICES names one by), GPU and compute instance (what the
    driver's Xid lines name)."""
    found = []
    for i in range(optional(lambda: nv.nvmlDeviceGetMaxMigDeviceCount(h), "", (nv.NVMLError,)) or 0):
        mig = optional(lambda i=i: nv.nvmlDeviceGetMigDeviceHandleByIndex(h, i), "", (nv.NVMLError,))
        if mig is None:
            continue
        uuid = optional(lambda: nv.nvmlDeviceGetUUID(mig), "", (nv.NVMLError,))
        if uuid:
            gi = optional(lambda: nv.nvmlDeviceGetGpuInstanceId(mig), "", (nv.NVMLError, AttributeError))
            ci = optional(lambda: nv.nvmlDeviceGetComputeInstanceId(mig), "", (nv.NVMLError, AttributeError))
            found.append(MigDevice(as_str(uuid), None if gi is None else int(gi), None if ci is None else int(ci)))
    return found


def _gpu(nv: Any, index: int, h: Any) -> Gpu:
    r = _GpuReads()
    pci = nv.nvmlDeviceGetPciInfo(h)
    mem = r.get("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
    ecc_mode = r.get("ecc", lambda: nv.nvmlDeviceGetEccMode(h))

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
        pci_bus_id=as_str(pci.busId),
        pci_device_id=int(pci.pciDeviceId),  # what the GPU model is known by, with the subsystem and default power
        pci_subsystem_id=int(pci.pciSubSystemId),
        memory_total_mib=int(mem.total) // 2**20 if mem else None,
        ecc_enabled=bool(ecc_mode[0]) if ecc_mode else None,
        ecc=_ecc(nv, h, r),
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
            replays=r.get("pcie_replays", lambda: nv.nvmlDeviceGetPcieReplayCounter(h)),
        ),
        nvlink_active=links or None,
        mig_current=mig[0] == nv.NVML_DEVICE_MIG_ENABLE if mig else None,
        mig_pending=mig[1] == nv.NVML_DEVICE_MIG_ENABLE if mig else None,
        mig_devices=_mig_devices(nv, h) if mig and mig[0] == nv.NVML_DEVICE_MIG_ENABLE else [],
        power=_power(nv, h, r),
        nvlink_errors=_nvlink_errors(nv, h, r, links),
        fabric=_fabric(nv, h, r),
        recovery_action=_recovery_action(nv, h),
        unreadable=r.unreadable,
        **gpu_state(nv, h),
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
                                 cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None, gpus=[],
                                 confidential_compute=confidential_compute(nv))
        for index in range(nv.nvmlDeviceGetCount()):
            _open(nv, index, inventory)
        return inventory
