"""`gpuval validate`, the whole pipeline: this machine's health checks, the all_reduce sweep judged against the
SKU's baseline at its named size (the baseline loaded once, by the health context, and passed down), one verdict
over both that says what it rests on, and the HTML report. The CLI calls `run_validate` and prints the outcome.

The verdict is a Status with its reason: FAIL (a check failed, a wrong element, the sweep under its fail limit;
exit 1), ERROR (something that applies could not run: nothing failed, but the node is not cleared; exit 2), PASS
(what was judged is within its bands; the reason says what that was).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from gpuval.baselines import Baseline, BaselineSource, baseline_source
from gpuval.checks.base import CheckContext, CheckResult
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Table
from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED, GpuvalError
from gpuval.node.gpus import visible_gpu_count
from gpuval.results import Status, new_run_id
from gpuval.workloads.collective.run import BenchRequest, bench_config, default_nprocs, run_local
from gpuval.workloads.health.run import HealthRun, run_health

CPU_TOP_BYTES = 64 * 1024**2  # a CPU sweep that ends in well under a minute
GPU_TOP_BYTES = 1024**3  # GPUs without a baseline size


def sweep_top(baseline: Baseline | None, gpus: int) -> int:
    """The largest all_reduce size: the baseline's named size on GPUs (judged there), else 1 GiB; 64 MiB on CPU."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if gpus and band and band.size_bytes:
        return int(band.size_bytes)
    return GPU_TOP_BYTES if gpus else CPU_TOP_BYTES


def judge_sweep(table: Table, baseline: Baseline | None) -> tuple[Status, str]:
    """(status, line) for the sweep against the SKU's all_reduce band, judged only at the band's named size, on
    the figure as measured (Band.judge, the one judge)."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if baseline is None or band is None:
        return Status.SKIPPED, "no all_reduce baseline for this machine: figures are reported, not judged"
    row = next((r for r in table.rows if r.size == band.size_bytes), None)
    if row is None:
        return Status.SKIPPED, (f"the {baseline.sku} baseline is at {format_size(int(band.size_bytes or 0))}; "
                                f"this sweep stopped at {format_size(table.rows[-1].size)}: not judged (use -e)")
    judged = band.judge(row.best_busbw())
    return judged.status, f"all_reduce at {format_size(row.size)}: {judged.reason}"


def verdict(wrong: int, sweep_status: Status, checks: list[CheckResult]) -> tuple[Status, str]:
    """(status, what it rests on): FAIL on any failed check or wrong element; ERROR (exit 2) when something that
    applies could not run; PASS only for what was judged, and it says what that was."""
    statuses = [r.status for r in checks]
    if wrong or sweep_status is Status.FAIL or Status.FAIL in statuses:
        return Status.FAIL, ""
    if Status.ERROR in statuses:
        return Status.ERROR, "some checks could not run (ERROR above): nothing failed, but the node is not cleared"
    judged = sum(s in (Status.PASS, Status.WARN) for s in statuses) + (sweep_status in (Status.PASS, Status.WARN))
    if not judged:
        return Status.PASS, "only the collective's data was checked (exact, 0 wrong elements): no GPU check " \
                            "applied and no baseline judged the bandwidth"
    return Status.PASS, (f"{judged} judged figures within their bands"
                         + (" (with warnings)" if Status.WARN in statuses else ""))


@dataclass
class SweepOutcome:
    """The all_reduce sweep: its table, its judgement against the baseline, the ranks' exit code."""

    table: Table
    status: Status
    reason: str
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        peak, last = self.table.peak(), self.table.rows[-1]
        return {"status": self.status.value, "reason": self.reason, "wrong_elements": self.table.total_wrong(),
                "peak_busbw": peak.best_busbw() if peak else None, "peak_size": peak.size if peak else None,
                "largest_size": last.size, "busbw_at_largest": last.best_busbw()}


@dataclass
class ValidateOutcome:
    """What `gpuval validate` found: the verdict (a Status) and its reason, the health run, the sweep (None when
    it measured nothing), the report written (or why not)."""

    run_id: str
    status: Status
    reason: str
    health: HealthRun
    sweep: SweepOutcome | None
    report: Path | None = None
    report_error: str = ""

    @property
    def sku(self) -> str | None:
        return self.health.ctx.sku

    @property
    def exit_code(self) -> int:
        """1 on FAIL, 2 on ERROR, else the ranks' own (1 when NCCL_TESTS_MIN_BW was missed)."""
        if self.status is Status.FAIL:
            return EXIT_FAILED
        if self.status is Status.ERROR:
            return EXIT_CANNOT_RUN
        return self.sweep.exit_code if self.sweep else 0

    def to_json(self) -> dict[str, Any]:
        """The object `gpuval validate --json` prints; health as Result records, as `gpuval health --json`."""
        return {"run_id": self.run_id, "status": self.status.value, "reason": self.reason, "sku": self.sku,
                "health": [r.model_dump(mode="json") for r in self.health.records],
                "sweep": self.sweep.to_json() if self.sweep else None,
                "report": str(self.report) if self.report else None}


def _report(run_id: str, target: Path | None, baselines: BaselineSource) -> tuple[Path | None, str]:
    """Write the run's HTML report; (path, "") or (None, why not) when the results store cannot be read."""
    from gpuval.report import write_report

    try:
        return write_report(run_id=run_id, output=target, baselines=baselines), ""
    except GpuvalError as exc:
        return None, str(exc)


def _source(ctx: CheckContext, files: Sequence[Path]) -> BaselineSource:
    """The report judges with the baseline the health checks used (loaded once), other SKUs from the files."""
    others = baseline_source(files)
    return lambda sku: ctx.baseline if ctx.baseline is not None and sku == ctx.sku else others(sku)


def run_validate(nprocs: int | None = None, maxbytes: int | None = None, sku: str | None = None,
                 baselines: Sequence[Path] = (), results: Path | None = None, report: Path | None = None,
                 quiet: bool = False, on_context: Callable[[CheckContext], None] = lambda _c: None,
                 on_result: Callable[[CheckResult], None] = lambda _r: None,
                 on_sweep: Callable[[int, int, int], None] = lambda _top, _ranks, _gpus: None,
                 allow_busy: bool = False) -> ValidateOutcome:
    """Validate this machine: every health check, then the all_reduce sweep (largest size: `maxbytes`, else the
    baseline's named size on GPUs), judged; then the report. `on_sweep(top, ranks, gpus)` is told before the sweep
    starts; rank 0 prints the table unless `quiet`. `allow_busy`: GPUs another process uses are measured, not judged."""
    run_id = new_run_id()
    health = run_health(None, sku, None, list(baselines), results, 3, run_id, on_context, on_result,
                        allow_busy=allow_busy)
    ctx = health.ctx
    gpus = visible_gpu_count()
    top = maxbytes or sweep_top(ctx.baseline, gpus)
    cfg = bench_config(collective="all_reduce", min_bytes=8, max_bytes=top, step_factor=2)
    ranks = nprocs or default_nprocs()
    on_sweep(top, ranks, gpus)
    req = BenchRequest(config=cfg, run_id=run_id, results_path=str(results) if results else None, sku=ctx.sku,
                       quiet=quiet)
    table, code = run_local(req, ranks)
    if not table.rows:  # the ranks have said why
        return ValidateOutcome(run_id, Status.ERROR, "the all_reduce sweep measured nothing (see the ranks' "
                                                     "messages)", health, None)
    sweep_status, sweep_reason = judge_sweep(table, ctx.baseline)
    status, reason = verdict(table.total_wrong(), sweep_status, health.suite.results)
    path, why_not = _report(run_id, report, _source(ctx, baselines))
    return ValidateOutcome(run_id, status, reason, health, SweepOutcome(table, sweep_status, sweep_reason, code),
                           path, why_not)
