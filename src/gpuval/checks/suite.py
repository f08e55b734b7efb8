"""The health suite: every check in a fixed order, run against a machine, as results and Result records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from gpuval.checks import fabric, gpu_state, measure  # noqa: F401  (importing them registers their checks)
from gpuval.checks.base import REGISTRY, Check, CheckContext, CheckResult
from gpuval.baselines import find_baseline
from gpuval.errors import UsageError
from gpuval.node import host
from gpuval.node.imds import detect_sku
from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.results import Metric, Result, Status

ORDER = ["gpu_count", "driver", "xid", "ecc", "row_remap", "clock_throttle", "app_clocks", "persistence",
         "pcie_link", "nvlink", "h2d_d2h_bandwidth", "gemm_tflops", "nccl_allreduce_node", "nccl_ib_loopback",
         "nccl_transport", "ib_ports", "topology"]


def all_checks() -> list[Check]:
    """Every check, in the order the suite runs them."""
    return [REGISTRY[name] for name in ORDER]


def select(names: Iterable[str] | None) -> list[Check]:
    """The checks named (all when none); an unknown name is a one-line error listing the known ones."""
    wanted = list(names or [])
    unknown = [n for n in wanted if n not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown check {unknown[0]!r}: known checks are {', '.join(ORDER)}")
    return [c for c in all_checks() if not wanted or c.name in wanted]


@dataclass
class SuiteRun:
    """One run of the suite: the context it ran in and each check's result."""

    ctx: CheckContext
    results: list[CheckResult]

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    @property
    def could_not_run(self) -> bool:
        """Every check errored: the suite could not run at all."""
        return bool(self.results) and all(r.status is Status.ERROR for r in self.results)


def make_context(machine: Machine, sku: str | None, baselines: Iterable[str | Path] = (),
                 measurer: object | None = None, imds_endpoint: str | None = None, repeats: int = 3) -> CheckContext:
    """A context for `machine`: SKU from the argument, GPUVAL_SKU or IMDS; its baseline, if any."""
    sku = sku or getattr(machine, "sku", None) or detect_sku(None, imds_endpoint)
    baseline = find_baseline(sku, baselines)
    if baseline is not None and sku is None:
        sku = baseline.sku
    return CheckContext(machine=machine, sku=sku, baseline=baseline, measurer=measurer,  # type: ignore[arg-type]
                        repeats=repeats)


def run_suite(ctx: CheckContext, checks: list[Check],
              on_result: Callable[[CheckResult], None] = lambda _r: None) -> SuiteRun:
    """Run the checks in order; each result goes to `on_result` as soon as it is known."""
    results = []
    for chosen in checks:
        result = chosen.run(ctx)
        results.append(result)
        on_result(result)
    return SuiteRun(ctx, results)


def to_record(result: CheckResult, ctx: CheckContext, run_id: str, started: datetime) -> Result:
    """A check result as a Result record (kind "health"), with where it ran: host, SKU, GPU model and count."""
    try:
        inv = ctx.inventory()
        model = inv.gpus[0].name if inv.gpus else None
        count = len(inv.gpus)
    except HardwareUnavailable:
        model, count = None, 0
    where = host.where(engine="local", sku=ctx.sku, gpu_model=model, gpu_count=count)
    metrics = []
    if isinstance(result.value, (int, float)) and not isinstance(result.value, bool):
        metrics.append(Metric(name=result.name, value=float(result.value), unit=result.unit))
    return Result(
        run_id=run_id, kind="health", name=result.name, started_at=started, finished_at=datetime.now(timezone.utc),
        where=where, params={"baseline": ctx.baseline.files if ctx.baseline else [],
                             "machine": getattr(ctx.machine, "description", "")},
        metrics=metrics, status=result.status, reason=result.reason,
        data={"fault_code": result.fault_code, "value": result.value, "expected": result.expected,
              "unit": result.unit, "details": result.details},
    )
