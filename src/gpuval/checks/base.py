"""What every health check shares: its result, the context it reads, and how a check is declared.

A check is a small function registered with `@check(name, fault_code)`. It reads the machine through the context
and returns a CheckResult. The runner turns "cannot read this here" into `skipped` (does not apply: no GPU, no
driver: NoGpuDriver, NotApplicable) or `error` (could not run: MeasurementUnavailable, HardwareUnavailable, any other
error), never into a failure: setup trouble is not unhealthy hardware.
"""

from __future__ import annotations

import ctypes.util
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping

from gpuval.baselines import Baseline, GpuIdentity, with_gpus
from gpuval.checks.figures import AllreduceMeasurement, Measurer  # noqa: F401  (re-exported: checks take them here)
from gpuval.errors import GpuvalError
from gpuval.node.kernel_log import PassMark
from gpuval.node.machine import (
    Gpu, GpuInventory, HardwareUnavailable, Machine, NoGpuDriver, NotRecorded, ToolMissing, XidWatch,
)
from gpuval.results.model import Status, worst_status


class NotApplicable(GpuvalError):
    """The check does not apply here (no GPU, nothing recorded to judge): its result is SKIPPED."""


class MeasurementUnavailable(GpuvalError):
    """GPUs are here but the measurement could not run (torch missing or CPU-only, no bandwidth measured, a rank
    crashed): its result is ERROR, never a skip, so a broken setup on a GPU node is never silent."""


@dataclass
class CheckResult:
    """One check's verdict: measured value, expected value, unit and a one-line reason."""

    name: str
    status: Status
    fault_code: str
    value: float | str | None = None
    expected: float | str | None = None
    unit: str = ""
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "fault_code": self.fault_code, "value": self.value,
                "expected": self.expected, "unit": self.unit, "reason": self.reason, "details": self.details}


@dataclass
class CheckContext:
    """What a check may read: the machine, its SKU and baseline, a measurer, the environment."""

    machine: Machine
    sku: str | None = None
    baseline: Baseline | None = None
    measurer: Measurer | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    repeats: int = 3
    libibverbs: bool | None = None  # None: look for it on this host
    since: datetime | None = None  # --since: where the xid check's window starts (None: last pass, else boot)
    xid_mark: PassMark | None = None  # where the last xid pass is kept (this machine only, never a recording's)
    dcgm_level: int | None = None  # --dcgm: run dcgmi diag at this level (None: not asked)
    xid_watch: XidWatch | None = None  # Xid events while the suite runs (started by run_suite)
    xid_watch_problem: HardwareUnavailable | None = None  # why no watch could start
    _inventory: GpuInventory | None = None
    _inventory_error: HardwareUnavailable | None = None
    _limits: dict[tuple[int, int | None], Baseline] = field(default_factory=dict)

    @property
    def limits(self) -> Baseline:
        """What this node's figures are judged by: the GPU model found on it (PCI device id, subsystem, default
        power; the NVML name as the fallback) and its host link, under the SKU's or profile's bands; the limits
        every SKU shares where nothing more is known."""
        return self._limits_of(None)

    def limits_for(self, index: int) -> Baseline:
        """The limits of one GPU (by NVML index): its own model and link, where a node mixes them."""
        return self._limits_of(index)

    def _limits_of(self, index: int | None) -> Baseline:
        key = (id(self.baseline), index)  # a test may set another baseline on a context: judged by that one
        if key not in self._limits:
            try:
                gpus = [g for g in self.inventory().gpus if index is None or g.index == index]
            except HardwareUnavailable:  # no driver, NVML unreadable: the SKU's bands alone
                gpus = []
            self._limits[key] = with_gpus(self.baseline, [identity_of(g) for g in gpus])
        return self._limits[key]

    def inventory(self) -> GpuInventory:
        """The GPU inventory, read once; NoGpuDriver without a driver."""
        if self._inventory is None and self._inventory_error is None:
            try:
                self._inventory = self.machine.gpu_inventory()
            except HardwareUnavailable as exc:
                self._inventory_error = exc
        if self._inventory_error is not None:
            raise self._inventory_error
        assert self._inventory is not None
        return self._inventory

    def gpus_present(self) -> int:
        """GPUs of this machine; NoGpuDriver without a driver, NotApplicable with none."""
        count = len(self.inventory().gpus)
        if not count:
            raise NotApplicable("the NVIDIA driver sees no GPU")
        return count

    def has_libibverbs(self) -> bool:
        if self.libibverbs is not None:
            return self.libibverbs
        return ctypes.util.find_library("ibverbs") is not None


def identity_of(gpu: Gpu) -> GpuIdentity:
    """What the GPU-level baseline knows a GPU by: name, PCI device id (the device half of NVML's pciDeviceId),
    subsystem id, default power limit, the PCIe generation and width its link trained at (the maximum generation:
    an idle GPU lowers the current one), and whether it reports NVLinks."""
    pcie = gpu.pcie
    return GpuIdentity(gpu.name, gpu.pci_device_id >> 16 if gpu.pci_device_id is not None else None,
                       gpu.pci_subsystem_id, gpu.power.default_w, pcie.gen_max or pcie.gen_current,
                       pcie.width_current or pcie.width_max, bool(gpu.nvlink_active))


@dataclass(frozen=True)
class Check:
    """A registered check: stable name, fault code, whether it needs a GPU, one line on what it does."""

    name: str
    fault_code: str
    needs_gpu: bool
    summary: str
    func: Callable[[CheckContext, "Check"], CheckResult]

    def result(self, status: Status, value: Any = None, expected: Any = None, unit: str = "", reason: str = "",
               **details: Any) -> CheckResult:
        """A CheckResult of this check."""
        return CheckResult(self.name, status, self.fault_code, value, expected, unit, reason, details)

    def run(self, ctx: CheckContext) -> CheckResult:
        """Run it; what cannot be read here is skipped (no GPU/driver) or error (could not run), never a fail."""
        try:
            return self.func(ctx, self)
        except NoGpuDriver as exc:
            return self.result(Status.SKIPPED, reason=str(exc))
        except (NotRecorded, ToolMissing) as exc:  # nothing recorded to judge, a tool not installed: not judged
            return self.result(Status.SKIPPED, reason=str(exc))
        except HardwareUnavailable as exc:
            return self.result(Status.ERROR, reason=f"could not run: {exc}")
        except NotApplicable as exc:
            return self.result(Status.SKIPPED, reason=str(exc))
        except GpuvalError as exc:
            return self.result(Status.ERROR, reason=f"could not run: {exc}")
        except Exception as exc:  # a check's bug or an odd machine must not end the suite with a traceback
            return self.result(Status.ERROR, reason=f"could not run: {type(exc).__name__}: {exc}")


REGISTRY: dict[str, Check] = {}


def check(name: str, fault_code: str, needs_gpu: bool = True) -> Callable[[Callable[..., CheckResult]], Check]:
    """Declare a check; its docstring's first line is its summary."""

    def register(func: Callable[[CheckContext, Check], CheckResult]) -> Check:
        summary = (func.__doc__ or name).strip().splitlines()[0]
        declared = Check(name, fault_code, needs_gpu, summary, func)
        REGISTRY[name] = declared
        return declared

    return register


def why_not_judged(ctx: CheckContext) -> str:
    """Why a figure cannot be judged here: no band for it on this GPU model and SKU (or none known)."""
    limits = ctx.limits
    if (limits.gpu is None or limits.gpu.model is None) and not ctx.baseline:
        how = f" ({limits.gpu.how})" if limits.gpu else ""
        return f"no baseline for this GPU model or SKU{how}"
    return f"no baseline for it on {limits.title}"


def not_judged(ctx: CheckContext) -> str:
    """Why a figure was reported and not judged, as a check's reason says it."""
    return f"{why_not_judged(ctx)}: reported, not judged"


def unreadable(inv: GpuInventory, *fields: str) -> list[tuple[Status, str]]:
    """ERROR findings for GPUs whose fields NVML could not read (not "not supported": e.g. no permission)."""
    return [(Status.ERROR, f"GPU {g.index}: {g.unreadable[f]}") for g in inv.gpus for f in fields if f in g.unreadable]


def worst(results: list[tuple[Status, str]]) -> tuple[Status, str]:
    """The most severe (status, reason) of several per-GPU findings; PASS with no findings."""
    if not results:
        return Status.PASS, ""
    top = worst_status(s for s, _ in results)
    return top, "; ".join(r for s, r in results if s is top)
