"""`gpuval validate`, the whole pipeline: this machine's health checks, the all_reduce sweep judged against the
SKU's baseline at its named size (the baseline loaded once, by the health context, and passed down), one verdict
over both that says what it rests on, and the HTML report. The CLI calls `run_validate` and prints the outcome.

The verdict is THE node verdict (results.verdict.node_verdict) over the health records and one record of the sweep:
FAIL (a check failed, a wrong element, the sweep under its fail limit; exit 1), ERROR (something that applies could
not run: nothing failed, but the node is not cleared; exit 2), PASS or WARN (what was judged is within its bands; the
reason says what that was; exit 0). The sweep's record is judged on its data (exact, or wrong elements) and on its
busbw where the baseline's all_reduce band for this node and this many ranks (Baseline.allreduce_band, the one rule)
exists, at that band's size. On one rank busbw is 0 by definition: the sweep is an NCCL smoke test (it started, its
data was exact), never judged by bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from gpuval.baselines import Baseline, BaselineSource, allreduce_figure, allreduce_size, baseline_source
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

SMOKE_TEST = ("one rank: a smoke test of the collective library (NCCL on a GPU: it started, its data is checked); "
              "busbw is 0 by definition with one rank (no all_reduce between GPUs), so no bandwidth is judged")
DATA_ONLY = ("only the collective's data was checked (exact, 0 wrong elements): no GPU check applied and no baseline "
             "judged the bandwidth")


def _ranks_note(baseline: Baseline, ranks: int) -> str:
    """Why a sweep over `ranks` ranks is not judged by this node's band (which is for one rank per GPU)."""
    node = baseline.allreduce_band(1, baseline.gpus)
    if node is None or node.expected is None:
        return "no all_reduce baseline for this machine: figures are reported, not judged"
    over = f"{baseline.gpus} GPUs" if baseline.gpus else "its GPUs"
    if ranks == 1:
        return (f"{SMOKE_TEST}; the {baseline.sku} all_reduce figure ({node.expected:g} GB/s) is for {over}: it "
                "cannot be judged on one")
    return (f"the {baseline.sku} all_reduce figure ({node.expected:g} GB/s) is for one rank per GPU of {over}; "
            f"this sweep ran {ranks} ranks: another measurement, not judged")


def judge_sweep(table: Table, baseline: Baseline | None) -> tuple[Status, str]:
    """(status, line) for the sweep against the band of an all_reduce over this node and this many ranks
    (Baseline.allreduce_band), judged only at the band's size, on the figure as measured (allreduce_figure, then
    Band.judge, the one judge); never on one rank, where busbw is 0 by definition."""
    band = baseline.allreduce_band(1, table.nranks) if baseline else None
    if band is None:
        return Status.SKIPPED, (_ranks_note(baseline, table.nranks) if baseline is not None else
                                SMOKE_TEST if table.nranks == 1 else
                                "no all_reduce baseline for this machine: figures are reported, not judged")
    size = allreduce_size(baseline, 1, table.nranks)
    row = next((r for r in table.rows if r.size == size), None)
    figure = allreduce_figure(row) if row is not None else None
    if figure is None:
        return Status.SKIPPED, (f"the {baseline.sku} baseline is at {format_size(size)}; this sweep stopped at "
                                f"{format_size(table.rows[-1].size)}: not judged (use -e)")
    judged = band.judge(figure)
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


def _source(ctx: CheckContext, baselines: BaselineSource) -> BaselineSource:
    """The report judges with the baseline the health checks used (loaded once), other SKUs from the same source."""
    return lambda sku: ctx.baseline if ctx.baseline is not None and sku == ctx.sku else baselines(sku)


def run_validate(nprocs: int | None = None, maxbytes: int | None = None, sku: str | None = None,
                 baselines: Sequence[Path] = (), results: Path | None = None, report: Path | None = None,
                 quiet: bool = False, on_context: Callable[[CheckContext], None] = lambda _c: None,
                 on_result: Callable[[CheckResult], None] = lambda _r: None,
                 on_sweep: Callable[[int, int, int], None] = lambda _top, _ranks, _gpus: None,
                 allow_busy: bool = False) -> ValidateOutcome:
    """Validate this machine: every health check, then the all_reduce sweep (largest size: `maxbytes`, else the
    size of the band judging this node's all_reduce over these ranks, allreduce_size), judged; then the report, by
    the same baselines (the packaged ones and the user's files `baselines`). `on_sweep(top, ranks, gpus)` is told
    before the sweep starts; rank 0 prints the table unless `quiet`. `allow_busy`: GPUs another process uses are
    measured, not judged."""
    run_id = new_run_id()
    source = baseline_source(baselines)  # the user's files read and checked before anything runs
    health = run_health(HealthRequest(run_id, sku=sku, baselines=tuple(baselines), results=results,
                                      allow_busy=allow_busy), on_context, on_result)
    ctx = health.ctx
    gpus = visible_gpu_count()
    ranks = nprocs or default_nprocs()
    top = maxbytes or allreduce_size(ctx.baseline, 1, ranks, on_gpus=gpus > 0)
    cfg = bench_config(collective="all_reduce", min_bytes=8, max_bytes=top, step_factor=2)
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
    path, why_not = _report(run_id, report, _source(ctx, source))
    return ValidateOutcome(run_id, found, health, SweepOutcome(table, judged, line, code), path, why_not)
