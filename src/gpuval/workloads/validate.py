"""`gpuval validate`, the whole pipeline: this machine's health checks, the all_reduce sweep judged against the
SKU's baseline at its named size (the baseline loaded once, by the health context, and passed down), one verdict
over both that says what it rests on, and the HTML report. The CLI calls `run_validate` and prints the outcome.

The verdict is THE node verdict (results.verdict.node_verdict) over the health records and one record of the sweep:
FAIL (a check failed, a wrong element, the sweep under its fail limit; exit 1), ERROR (something that applies could
not run: nothing failed, but the node is not cleared; exit 2), PASS or WARN (what was judged is within its bands; the
reason says what that was; exit 0). The sweep's record is judged on its data (exact, or wrong elements) and, where a
baseline names a figure for this many GPUs, on its busbw. On one rank busbw is 0 by definition: the sweep is an NCCL
smoke test (it started, its data was exact), never judged by bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from gpuval.baselines import Baseline, BaselineSource, baseline_source
from gpuval.checks.base import CheckContext, CheckResult
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Table
from gpuval.errors import EXIT_FAILED, GpuvalError
from gpuval.node.gpus import visible_gpu_count
from gpuval.results import Result, Status, Where, new_run_id
from gpuval.results.verdict import NodeVerdict, exit_code_of, node_verdict
from gpuval.workloads.base import this_host
from gpuval.workloads.collective.run import BenchRequest, bench_config, default_nprocs, run_local
from gpuval.workloads.health.run import HealthRequest, HealthRun, run_health

CPU_TOP_BYTES = 64 * 1024**2  # a CPU sweep that ends in well under a minute
GPU_TOP_BYTES = 1024**3  # GPUs without a baseline size


def sweep_top(baseline: Baseline | None, gpus: int) -> int:
    """The largest all_reduce size: the baseline's named size on GPUs (judged there), else 1 GiB; 64 MiB on CPU."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if gpus and band and band.size_bytes:
        return int(band.size_bytes)
    return GPU_TOP_BYTES if gpus else CPU_TOP_BYTES


SMOKE_TEST = ("one rank: a smoke test of the collective library (NCCL on a GPU: it started, its data is checked); "
              "busbw is 0 by definition with one rank (no all_reduce between GPUs), so no bandwidth is judged")
DATA_ONLY = ("only the collective's data was checked (exact, 0 wrong elements): no GPU check applied and no baseline "
             "judged the bandwidth")


def judge_sweep(table: Table, baseline: Baseline | None) -> tuple[Status, str]:
    """(status, line) for the sweep against the SKU's all_reduce band, judged only at the band's named size, on
    the figure as measured (Band.judge, the one judge); never on one rank, where busbw is 0 by definition."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if table.nranks == 1:
        if baseline is not None and band is not None:
            gpus = baseline.band("gpu_count")
            over = f"{gpus.expected:g} GPUs" if gpus and gpus.expected else "its GPUs"
            return Status.SKIPPED, (f"{SMOKE_TEST}; the {baseline.sku} all_reduce figure ({band.expected:g} GB/s) is "
                                    f"for {over}: it cannot be judged on one")
        return Status.SKIPPED, SMOKE_TEST
    if baseline is None or band is None:
        return Status.SKIPPED, "no all_reduce baseline for this machine: figures are reported, not judged"
    row = next((r for r in table.rows if r.size == band.size_bytes), None)
    if row is None:
        return Status.SKIPPED, (f"the {baseline.sku} baseline is at {format_size(int(band.size_bytes or 0))}; "
                                f"this sweep stopped at {format_size(table.rows[-1].size)}: not judged (use -e)")
    judged = band.judge(row.best_busbw())
    return judged.status, f"all_reduce at {format_size(row.size)}: {judged.reason}"


def sweep_status(wrong: int, judged: Status, reason: str, ranks_exit: int = 0) -> tuple[Status, str]:
    """The sweep as one judged record: FAIL on a wrong element (or a rank's own FAIL: NCCL_TESTS_MIN_BW missed),
    ERROR when a rank exited otherwise badly, its busbw judgement where one was made, else PASS on its data alone
    (exact: the collective returned the right result; the reason says the bandwidth was not judged)."""
    if wrong:
        return Status.FAIL, f"{wrong} wrong element(s): the all_reduce returned incorrect data"
    if ranks_exit == EXIT_FAILED:
        return Status.FAIL, "the ranks exited 1: the average busbw missed NCCL_TESTS_MIN_BW"
    if ranks_exit:
        return Status.ERROR, f"could not run: the ranks exited with code {ranks_exit}"
    if judged is Status.SKIPPED:
        return Status.PASS, f"0 wrong elements; busbw not judged: {reason}"
    return judged, reason


def sweep_record(status: Status, reason: str, where: Where, run_id: str, ranks: int | None) -> Result:
    """The sweep as the record the node verdict reads beside the health records (the stored collective record,
    with the table, is the ranks' own)."""
    return Result(run_id=run_id, kind="collective", name="all_reduce", where=where.model_copy(update={"ranks": ranks}),
                  status=status, reason=reason)


def verdict(wrong: int, judged: Status, records: Sequence[Result], reason: str = "", ranks_exit: int = 0,
            where: Where | None = None, ranks: int | None = None) -> NodeVerdict:
    """THE node verdict (node_verdict) over the health records and the sweep's record; when only the sweep's data
    was judged (no GPU check applied, no baseline judged the bandwidth), its reason says so."""
    run_id = records[0].run_id if records else ""
    status, why = sweep_status(wrong, judged, reason, ranks_exit)
    sweep = sweep_record(status, why, where or (records[0].where if records else this_host()), run_id, ranks)
    found = node_verdict([*records, sweep])
    only_data = judged is Status.SKIPPED and not any(r.status in (Status.PASS, Status.WARN) for r in records)
    if found.status is Status.PASS and only_data:
        return NodeVerdict(found.status, SMOKE_TEST if ranks == 1 else DATA_ONLY)
    return found


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
    verdict: NodeVerdict
    health: HealthRun
    sweep: SweepOutcome | None
    report: Path | None = None
    report_error: str = ""

    @property
    def status(self) -> Status:
        return self.verdict.status

    @property
    def reason(self) -> str:
        return self.verdict.reason

    @property
    def sku(self) -> str | None:
        return self.health.ctx.sku

    @property
    def exit_code(self) -> int:
        """The exit contract: 0 pass or warn, 1 any fail, 2 could not run or not judged."""
        return exit_code_of(self.status)

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
    health = run_health(HealthRequest(run_id, sku=sku, baselines=tuple(baselines), results=results,
                                      allow_busy=allow_busy), on_context, on_result)
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
        where = health.records[0].where if health.records else this_host()
        nothing = sweep_record(Status.ERROR, "could not run: the all_reduce sweep measured nothing (see the ranks' "
                                             "messages)", where, run_id, ranks)
        return ValidateOutcome(run_id, node_verdict([*health.records, nothing]), health, None)
    judged, line = judge_sweep(table, ctx.baseline)
    found = verdict(table.total_wrong(), judged, health.records, line, code, ranks=table.nranks)
    path, why_not = _report(run_id, report, _source(ctx, baselines))
    return ValidateOutcome(run_id, found, health, SweepOutcome(table, judged, line, code), path, why_not)
