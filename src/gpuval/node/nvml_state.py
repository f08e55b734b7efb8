"""The NVML reads nvidia-smi -q shows and the inventory's basics do not (node.nvml calls them per GPU): the bank
remap histogram, unrepairable memory, clock event reason counters, GPU and HBM temperatures with their limits,
inforom validity, VBIOS, compute and virtualization mode; the system's confidential compute state; and what else
(What else runs on the GPUs: node.nvml_activity.)

Each read that a GPU or driver does not support is None (an older nvidia-ml-py without the function, too).
"""

from __future__ import annotations

from typing import Any

from gpuval.node.gpu_state import ClockEventCounters, RemapHistogram, Temperatures

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
VIRTUALIZATION = {0: "none", 1: "pass_through", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
# nvml.h field ids gpuval reads, by nvidia-ml-py's name, with the number used where an older nvidia-ml-py lacks the
# name. SW power cap and sync boost are the older PERF_POLICY ids 74 and 76; 269-271 are the clock event counters
# (251-253 are power smoothing: NVML_FI_PWR_SMOOTHING_*, read only by scripts/gpu-check's NVML probe).
# tests/node/test_nvml_state.py holds every number to the installed nvidia-ml-py's constant of its name.
FIELD_IDS = {"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP": 74, "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST": 76,
             "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN": 269,
             "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN": 270,
             "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN": 271, "NVML_FI_DEV_MEMORY_TEMP": 82}
PROBE_FIELD_IDS = {"NVML_FI_PWR_SMOOTHING_ENABLED": 251, "NVML_FI_PWR_SMOOTHING_PRIV_LVL": 252,
                   "NVML_FI_PWR_SMOOTHING_IMM_RAMP_DOWN_ENABLED": 253}
_COUNTERS = (("sw_power_cap_s", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
             ("sync_boost_s", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
             ("sw_thermal_s", "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
             ("hw_thermal_s", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
             ("hw_power_brake_s", "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"))
COUNTER_UNIT_S = 1e-9  # the counters count nanoseconds (nvml.h; nvidia-smi -q prints them divided by 1000 as "us")


def field_id(nv: Any, name: str) -> int:
    """The id of field `name`: nvidia-ml-py's constant, else the number nvml.h gives it."""
    return int(getattr(nv, name, {**FIELD_IDS, **PROBE_FIELD_IDS}[name]))


def quiet(call: Any) -> Any:
    """The value, or None on any NVML error or a function this nvidia-ml-py lacks."""
    import pynvml

    try:
        return call()
    except (pynvml.NVMLError, AttributeError, NotImplementedError):
        return None


def field_values(nv: Any, h: Any, ids: list[int]) -> list[float | None]:
    """NVML field values by id, each as a number, None where the driver does not report it."""
    got = quiet(lambda: nv.nvmlDeviceGetFieldValues(h, ids))
    if not got:
        return [None] * len(ids)
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return [getattr(v.value, members.get(int(v.valueType), "ullVal")) if int(v.nvmlReturn) == nv.NVML_SUCCESS
            else None for v in got]


def clock_event_counters(nv: Any, h: Any) -> ClockEventCounters | None:
    """The seconds each clock event reason held the GPU's clocks down since the driver loaded; None where the
    driver counts none of them."""
    ids = [field_id(nv, name) for _, name in _COUNTERS]
    values = field_values(nv, h, ids)
    if all(v is None for v in values):
        return None
    return ClockEventCounters(**{key: None if v is None else float(v) * COUNTER_UNIT_S
                                 for (key, _), v in zip(_COUNTERS, values)})


def _temperatures(nv: Any, h: Any) -> Temperatures:
    memory = field_values(nv, h, [field_id(nv, "NVML_FI_DEV_MEMORY_TEMP")])[0]
    return Temperatures(
        gpu_c=quiet(lambda: int(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
        memory_c=int(memory) if memory else None,  # 0: the GPU has no HBM sensor to read
        gpu_slowdown_c=quiet(lambda: int(nv.nvmlDeviceGetTemperatureThreshold(
            h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))) or None,
        memory_max_c=quiet(lambda: int(nv.nvmlDeviceGetTemperatureThreshold(
            h, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX))) or None)


def _inforom(nv: Any, h: Any) -> tuple[bool | None, str | None]:
    """(valid, NVML's words when not): a corrupted inforom fails validation; unsupported says nothing."""
    try:
        nv.nvmlDeviceValidateInforom(h)
        return True, None
    except nv.NVMLError_CorruptedInforom as exc:
        return False, str(exc) or "corrupted inforom"
    except (nv.NVMLError, AttributeError):
        return None, None


def _histogram(nv: Any, h: Any) -> RemapHistogram | None:
    values = quiet(lambda: nv.nvmlDeviceGetRowRemapperHistogram(h))
    if values is None:
        return None
    return RemapHistogram(int(values.max), int(values.high), int(values.partial), int(values.low), int(values.none))


def gpu_state(nv: Any, h: Any) -> dict[str, Any]:
    """The Gpu fields of this module, read from NVML for one GPU."""
    valid, why = _inforom(nv, h)
    unrepairable = quiet(lambda: nv.nvmlDeviceGetUnrepairableMemoryFlag_v1(h))
    compute = quiet(lambda: nv.nvmlDeviceGetComputeMode(h))
    virtual = quiet(lambda: nv.nvmlDeviceGetVirtualizationMode(h))
    vbios = quiet(lambda: nv.nvmlDeviceGetVbiosVersion(h))
    return {"remap_histogram": _histogram(nv, h), "unrepairable_memory": None if unrepairable is None
            else bool(unrepairable), "clock_event_counters": clock_event_counters(nv, h), "temperature": _temperatures(nv, h),
            "inforom_valid": valid, "inforom_error": why,
            "vbios": vbios.decode() if isinstance(vbios, bytes) else vbios,
            "compute_mode": None if compute is None else COMPUTE_MODES.get(int(compute), f"mode {compute}"),
            "virtualization": None if virtual is None else VIRTUALIZATION.get(int(virtual), f"mode {virtual}")}


def confidential_compute(nv: Any) -> bool | None:
    """Whether the system runs in confidential compute mode (None where the driver cannot say)."""
    state = quiet(nv.nvmlSystemGetConfComputeState)
    return None if state is None else int(state.ccFeature) == nv.NVML_CC_SYSTEM_FEATURE_ENABLED
