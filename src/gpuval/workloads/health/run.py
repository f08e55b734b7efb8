"""What runs for the health workload: the suite on this machine or a recording, each check's Result saved as soon
as the check ends (a later failure or Ctrl-C loses nothing measured). `gpuval health` and `gpuval validate` call it;
they only print what comes back."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpuval.checks.base import CheckContext, CheckResult
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import SuiteRun, make_context, run_suite, select
from gpuval.node.kernel_log import PassMark
from gpuval.node.machine import HardwareUnavailable
from gpuval.results import Result, Where, save_results
from gpuval.workloads.base import open_machine, this_host, this_sku
from gpuval.workloads.health.measurer import TorchMeasurer
from gpuval.workloads.health.records import health_record


@dataclass
class HealthRun:
    """One run of the suite: each check's result (suite.results) and its Result record, in the same order."""

    suite: SuiteRun
    records: list[Result] = field(default_factory=list)

    @property
    def ctx(self) -> CheckContext:
        return self.suite.ctx


def _where(ctx: CheckContext) -> Where:
    """This machine, with the SKU and GPUs of what was judged (a recording's, when one was)."""
    try:
        gpus = ctx.inventory().gpus
        model, count = (gpus[0].name if gpus else None), len(gpus)
    except HardwareUnavailable:
        model, count = None, 0
    return this_host(engine="local", sku=ctx.sku, gpu_model=model, gpu_count=count)


def run_health(recorded: str | None, sku: str | None, checks: list[str] | None, baselines: list[Path],
               results: Path | None, repeats: int, run_id: str,
               on_context: Callable[[CheckContext], None] = lambda _ctx: None,
               on_result: Callable[[CheckResult], None] = lambda _r: None, since: datetime | None = None,
               dcgm: int | None = None) -> HealthRun:
    """Run the chosen checks (all by default) on this machine, or on a recording (`recorded`: a packaged SKU or
    a YAML file, judged on its recorded figures; a real machine measures with torch).
    The SKU: `sku`, else the recording's, else GPUVAL_SKU or Azure IMDS. `since` starts the xid window (default:
    the last pass on this machine, else boot); `dcgm` runs dcgmi diag at that level (added to --check's list)."""
    chosen = select([*checks, "dcgm_diag"] if checks and dcgm and "dcgm_diag" not in checks else checks)
    machine = open_machine(recorded)
    measurer = (RecordedMeasurer(machine.measurements, machine.description) if recorded  # type: ignore[attr-defined]
                else TorchMeasurer(run_id, str(results) if results else None))
    ctx = make_context(machine, sku or getattr(machine, "sku", None) or this_sku(), baselines, measurer,
                       repeats=repeats, since=since, dcgm_level=dcgm, xid_mark=None if recorded else PassMark())
    on_context(ctx)
    started = datetime.now(timezone.utc)
    params = {"baseline": ctx.baseline.files if ctx.baseline else [], "machine": getattr(machine, "description", "")}
    where = _where(ctx)
    records: list[Result] = []

    def record(result: CheckResult) -> None:
        records.append(health_record(result, where, run_id, started, params))
        save_results(records[-1:], results)
        on_result(result)

    return HealthRun(run_suite(ctx, chosen, record), records)
