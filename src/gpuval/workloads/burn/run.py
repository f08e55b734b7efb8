"""What runs for the burn workload: every GPU of this machine (or a recording's figures) under a GEMM load at once
for `seconds`, judged (gpuval.checks.load.burn_check), its one Result record saved as soon as it is judged."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from gpuval.checks.base import CheckContext, CheckResult, Measurer
from gpuval.checks.load import burn_check
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context
from gpuval.errors import UsageError
from gpuval.node.machine import HardwareUnavailable
from gpuval.node.recorded import RecordedMachine
from gpuval.results import Result, save_results
from gpuval.results.verdict import NodeVerdict, node_verdict
from gpuval.workloads.base import open_machine, this_host, this_sku
from gpuval.workloads.burn.records import burn_record
from gpuval.workloads.health.busy import MeasuringGuard
from gpuval.workloads.health.measurer import TorchMeasurer

MAX_S = 24 * 3600.0


@dataclass
class BurnRun:
    """One burn: the context it ran in, its check's result and its record."""

    ctx: CheckContext
    result: CheckResult
    record: Result

    @property
    def verdict(self) -> NodeVerdict:
        """THE node verdict over the burn's one record (a skipped burn judged nothing: exit 2)."""
        return node_verdict([self.record])


def parse_duration(text: str) -> float:
    """'60', '60s', '5m', '1h' -> seconds; anything else (or not more than 0, or over a day) is a UsageError."""
    value = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(value[-1:], None)
    number = value[:-1] if scale else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise UsageError(f"--duration {text!r}: a number of seconds, or with s, m or h (60s, 5m)") from None
    if not 0 < seconds <= MAX_S:
        raise UsageError(f"--duration {text!r}: more than 0 and at most 24h")
    return seconds


def run_burn(seconds: float, recorded: str | None, sku: str | None, baselines: Sequence[Path], results: Path | None,
             run_id: str, allow_busy: bool = False) -> BurnRun:
    """Burn this machine's GPUs (or judge a recording's figures: `recorded`, a packaged SKU or a YAML file) for
    `seconds`; the SKU: `sku`, else the recording's, else GPUVAL_SKU or Azure IMDS. A GPU another process uses
    is not burnt (GPU_BUSY; `allow_busy`: burnt and reported, not judged)."""
    machine = open_machine(recorded)
    recording = machine if isinstance(machine, RecordedMachine) else None
    measurer: Measurer = (RecordedMeasurer(recording.measurements, recording.description) if recording
                          else TorchMeasurer(run_id))
    own_sku = recording.sku if recording else None
    ctx = make_context(machine, sku or own_sku or this_sku(), baselines, measurer, repeats=1)
    started = datetime.now(timezone.utc)
    result = MeasuringGuard(allow_busy).wrap([burn_check(seconds)])[0].run(ctx)
    try:
        gpus = ctx.inventory().gpus
        model, count = (gpus[0].name if gpus else None), len(gpus)
    except HardwareUnavailable:
        model, count = None, 0
    where = this_host(engine="local", sku=ctx.sku, gpu_model=model, gpu_count=count)
    params = {"seconds": seconds, "baseline": ctx.baseline.files if ctx.baseline else [],
              "machine": machine.description}
    record = burn_record(result, where, run_id, started, params)
    save_results([record], results)
    return BurnRun(ctx, result, record)
