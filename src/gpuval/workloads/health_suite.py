"""The health suite as a workload: run the checks on a machine, save each Result as its check ends.

`gpuval health` and `gpuval validate` both run it; they only choose the machine and print what comes back.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpuval.checks.base import CheckResult


def run_health_suite(machine: Any, recorded: bool, sku: str | None, checks: list[str] | None, baselines: list[Path],
                     results: Path | None, repeats: int, run_id: str,
                     on_context: Callable[[Any], None] = lambda _ctx: None,
                     on_result: Callable[[CheckResult], None] = lambda _r: None) -> Any:
    """Run the chosen checks (all by default) and return the SuiteRun. A recorded machine is judged on its
    recorded figures; a real one measures with torch. Each record is saved as soon as its check ends, so a later
    failure or Ctrl-C loses nothing measured."""
    from gpuval.checks.measure import RecordedMeasurer
    from gpuval.checks.suite import make_context, run_suite, select, to_record
    from gpuval.results import save_results
    from gpuval.workloads.gpu_measure import TorchMeasurer

    chosen = select(checks)
    measurer = (RecordedMeasurer(machine.measurements, machine.description) if recorded
                else TorchMeasurer(run_id, str(results) if results else None))
    ctx = make_context(machine, sku, baselines, measurer, repeats=repeats)
    on_context(ctx)
    started = datetime.now(timezone.utc)

    def record(result: CheckResult) -> None:
        save_results([to_record(result, ctx, run_id, started)], results)
        on_result(result)

    return run_suite(ctx, chosen, record)
