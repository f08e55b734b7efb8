"""GPU settings through NVML (`gpuval tune`): application clocks, locked clocks, persistence mode.

Default application clocks do not cap the clock on Pascal and later (the GPU boosts above them as power and
temperature allow); setting application clocks turns auto-boost off, and locked clocks (`nvidia-smi -lgc`, what
AzNHC sets before its bandwidth checks) hold the clock in a range. `lock_clocks` locks the SM clock at its maximum
(and the memory clock where the GPU supports it), `unlock_clocks` releases both, `reset_clocks` puts application
clocks back to the default and releases locked clocks too, so a node left locked by an interrupted job is restored.

Every NVML call is guarded: a GPU or driver that does not support a setting, a lost GPU or missing privileges give
a GpuvalError with NVML's words (NeedsRoot for privileges), never a raw NVMLError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from gpuval.errors import GpuvalError
from gpuval.node.nvml import as_str, nvml_session, optional, text_of

T = TypeVar("T")


class NeedsRoot(GpuvalError):
    """NVML refused a change for lack of privileges."""


class NotSupported(GpuvalError):
    """This GPU or driver does not support the setting."""


@dataclass
class ClockState:
    """Clocks of one GPU after a change: application, the driver's default, the highest the GPU supports."""

    index: int
    name: str
    sm_application: int | None
    mem_application: int | None
    sm_max: int | None
    mem_max: int | None
    persistence_mode: bool | None
    sm_default: int | None = None
    mem_default: int | None = None
    notes: list[str] = field(default_factory=list)  # what was skipped, and why


def _call(nv: Any, what: str, call: Callable[[], T]) -> T:
    """NVML's answer, or a one-line GpuvalError saying what failed."""
    try:
        return call()
    except nv.NVMLError_NoPermission:
        raise NeedsRoot(f"{what} needs root: run it as root (sudo gpuval tune ...)") from None
    except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
        raise NotSupported(f"{what}: this GPU or driver does not support it") from None
    except nv.NVMLError as exc:
        raise GpuvalError(f"{what} failed: NVML says {text_of(exc)}") from None


def _handle(nv: Any, index: int) -> Any:
    return _call(nv, f"opening GPU {index}", lambda: nv.nvmlDeviceGetHandleByIndex(index))


def _state(nv: Any, index: int, notes: list[str] | None = None) -> ClockState:
    h = _handle(nv, index)

    def clock(getter: Callable[[Any, int], int], kind: int) -> int | None:
        return optional(lambda: getter(h, kind), "a clock")

    return ClockState(
        index=index, name=as_str(_call(nv, f"reading GPU {index}'s name", lambda: nv.nvmlDeviceGetName(h))),
        sm_application=clock(nv.nvmlDeviceGetApplicationsClock, nv.NVML_CLOCK_SM),
        mem_application=clock(nv.nvmlDeviceGetApplicationsClock, nv.NVML_CLOCK_MEM),
        sm_max=clock(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM),
        mem_max=clock(nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_MEM),
        persistence_mode=optional(lambda: nv.nvmlDeviceGetPersistenceMode(h) == nv.NVML_FEATURE_ENABLED),
        sm_default=clock(nv.nvmlDeviceGetDefaultApplicationsClock, nv.NVML_CLOCK_SM),
        mem_default=clock(nv.nvmlDeviceGetDefaultApplicationsClock, nv.NVML_CLOCK_MEM),
        notes=list(notes or []),
    )


def _indices(nv: Any, gpus: list[int] | None) -> list[int]:
    count = _call(nv, "counting GPUs", nv.nvmlDeviceGetCount)
    chosen = list(range(count)) if not gpus else gpus
    bad = [g for g in chosen if not 0 <= g < count]
    if bad:
        raise GpuvalError(f"no GPU {bad[0]} here: this machine has {count} (0..{count - 1})")
    return chosen


def _each(gpus: list[int] | None, change: Callable[[Any, int, Any], list[str]]) -> list[ClockState]:
    """Apply `change(nv, index, handle)` to each chosen GPU; it returns notes on what it skipped."""
    with nvml_session() as nv:
        chosen = _indices(nv, gpus)
        notes = {i: change(nv, i, _handle(nv, i)) for i in chosen}
        return [_state(nv, i, notes[i]) for i in chosen]


def _optional_change(nv: Any, what: str, call: Callable[[], Any]) -> list[str]:
    """A change that some GPUs do not have (memory locked clocks before Ampere): a note instead of an error."""
    try:
        _call(nv, what, call)
    except NotSupported as exc:
        return [str(exc)]
    return []


def list_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Application, default and maximum clocks of each GPU."""
    return _each(gpus, lambda nv, i, h: [])


def set_max_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Set application clocks to the highest memory clock and the highest SM clock it supports."""
    def change(nv: Any, i: int, h: Any) -> list[str]:
        what = f"setting GPU {i} application clocks"
        mem = max(_call(nv, f"{what} (supported memory clocks)", lambda: nv.nvmlDeviceGetSupportedMemoryClocks(h)))
        sm = max(_call(nv, f"{what} (supported SM clocks)", lambda: nv.nvmlDeviceGetSupportedGraphicsClocks(h, mem)))
        _call(nv, f"{what} to {mem},{sm} MHz", lambda: nv.nvmlDeviceSetApplicationsClocks(h, mem, sm))
        return []
    return _each(gpus, change)


def lock_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Lock the SM clock at the GPU's maximum (nvidia-smi -lgc max,max) and the memory clock at its maximum where
    the GPU supports memory locked clocks (Ampere and later)."""
    def change(nv: Any, i: int, h: Any) -> list[str]:
        sm = _call(nv, f"reading GPU {i}'s maximum SM clock", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        _call(nv, f"locking GPU {i}'s SM clock at {sm} MHz", lambda: nv.nvmlDeviceSetGpuLockedClocks(h, sm, sm))
        mem = optional(lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM), "the maximum memory clock")
        if mem is None:
            return ["memory clock not locked: the GPU reports no maximum memory clock"]
        return _optional_change(nv, f"locking GPU {i}'s memory clock at {mem} MHz",
                                lambda: nv.nvmlDeviceSetMemoryLockedClocks(h, mem, mem))
    return _each(gpus, change)


def unlock_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Release locked SM and memory clocks (nvidia-smi -rgc / -rmc)."""
    def change(nv: Any, i: int, h: Any) -> list[str]:
        _call(nv, f"releasing GPU {i}'s locked SM clock", lambda: nv.nvmlDeviceResetGpuLockedClocks(h))
        return _optional_change(nv, f"releasing GPU {i}'s locked memory clock",
                                lambda: nv.nvmlDeviceResetMemoryLockedClocks(h))
    return _each(gpus, change)


def reset_clocks(gpus: list[int] | None = None) -> list[ClockState]:
    """Application clocks back to the driver's defaults, and locked SM and memory clocks released: every clock
    setting undone, whichever was made (a GPU that has one kind and not the other gets a note)."""
    def change(nv: Any, i: int, h: Any) -> list[str]:
        notes = []
        for what, call in ((f"resetting GPU {i} application clocks", nv.nvmlDeviceResetApplicationsClocks),
                           (f"releasing GPU {i}'s locked SM clock", nv.nvmlDeviceResetGpuLockedClocks),
                           (f"releasing GPU {i}'s locked memory clock", nv.nvmlDeviceResetMemoryLockedClocks)):
            notes += _optional_change(nv, what, lambda c=call: c(h))
        if len(notes) == 3:
            raise NotSupported(f"GPU {i} supports neither application nor locked clocks: nothing to reset")
        return notes
    return _each(gpus, change)


def set_persistence(enabled: bool, gpus: list[int] | None = None) -> list[ClockState]:
    """Turn persistence mode on or off (the driver stays loaded between jobs; settings survive)."""
    def change(nv: Any, i: int, h: Any) -> list[str]:
        mode = nv.NVML_FEATURE_ENABLED if enabled else nv.NVML_FEATURE_DISABLED
        _call(nv, f"turning GPU {i} persistence mode {'on' if enabled else 'off'}",
              lambda: nv.nvmlDeviceSetPersistenceMode(h, mode))
        return []
    return _each(gpus, change)
