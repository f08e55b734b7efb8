"""What runs for the health workload: the suite on this machine or a recording, each check's Result saved as soon
as the check ends (a later failure or Ctrl-C loses nothing measured). `gpuval health` and `gpuval validate` call it;
they only print what comes back.

A full run (every check) keeps its verdict on the node for `--quick` (workloads/health/last_full.py). A quick run
(`quick=True`: Slurm's HealthCheckProgram, the DaemonSet loop) runs every check but the measuring ones, with a
measurer that refuses to measure (a measuring check missing from MEASURING is skipped, never run), imports no torch,
folds the node's last full result in as one more record (`last_full`), and saves its records only where asked
(`results`): every few minutes on every node, a default log would only grow."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Mapping

from gpuval import __version__
from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable
from gpuval.checks.figures import (
    AllreduceMeasurement, CopyFigure, GpuRef, HbmFigure, LoadRun, Measurer, PeerFigure,
)
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import SuiteRun, make_context, run_suite, select
from gpuval.engines.nodes import this_node
from gpuval.errors import UsageError
from gpuval.node.kernel_log import PassMark
from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.node.recorded import RecordedMachine
from gpuval.operate.node_state import check_node, rechecked_codes
from gpuval.results import Result, Status, Where, save_results
from gpuval.results.sink import append_jsonl, store_results
from gpuval.results.verdict import NodeVerdict, node_verdict
from gpuval.workloads.base import open_machine, this_host, this_sku
from gpuval.workloads.health import last_full
from gpuval.workloads.health.busy import MeasuringGuard
from gpuval.workloads.health.measurer import TorchMeasurer
from gpuval.workloads.health.records import health_record


# The checks that measure (copies, GEMM, NCCL runs): what --quick leaves out. Every other check only reads.
MEASURING = ("h2d_d2h_bandwidth", "gemm_tflops", "p2p_bandwidth", "hbm_bandwidth", "gemm_sustained",
             "clocks_under_load", "nccl_allreduce_node", "nccl_ib_loopback", "nccl_transport",
             "ib_write_bw", "dcgm_diag")  # perftest and dcgmi run for seconds to minutes: never in a quick run
LAST_FULL = "last_full"  # the quick run's record of the node's last full check
QUICK_REFUSAL = "--quick measures nothing"


class NoMeasurement:
    """The measurer of a quick run: it measures nothing, so a measuring check is skipped, never run."""

    def copy_bandwidth(self, gpus: list[GpuRef]) -> list[CopyFigure]:
        raise NotApplicable(QUICK_REFUSAL)

    def gemm_tflops(self, dtype: str, gpus: list[GpuRef]) -> list[tuple[GpuRef, float]]:
        raise NotApplicable(QUICK_REFUSAL)

    def gemm_load(self, dtype: str, gpus: list[GpuRef], seconds: float, alone: bool = True) -> LoadRun:
        raise NotApplicable(QUICK_REFUSAL)

    def p2p_bandwidth(self, gpus: list[GpuRef]) -> list[PeerFigure]:
        raise NotApplicable(QUICK_REFUSAL)

    def hbm_bandwidth(self, gpus: list[GpuRef]) -> list[HbmFigure]:
        raise NotApplicable(QUICK_REFUSAL)

    def allreduce_busbw(self, size_bytes: int, gpus: list[GpuRef], repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        raise NotApplicable(QUICK_REFUSAL)

    def nccl_debug_log(self, gpus: list[GpuRef], env: Mapping[str, str]) -> str:
        raise NotApplicable(QUICK_REFUSAL)


@dataclass
class HealthRun:
    """One run of the suite: each check's result (suite.results) and its Result record, in the same order (a quick
    run's `last_full` record last). `node`: the scheduler's name of the node judged; `kept`: the verdict a full run
    kept for --quick (None when it kept none, `kept_note` says why); `fold`: what a quick run read of it."""

    suite: SuiteRun
    records: list[Result] = field(default_factory=list)
    node: str = ""
    quick: bool = False
    kept: last_full.LastFull | None = None
    kept_note: str = ""
    fold: last_full.Fold | None = None
    partial_hold: str = ""  # a --check subset: why it must not lift what a full check's failure set
    saving: Saving = field(default_factory=lambda: Saving(None))
    max_age: timedelta = last_full.DEFAULT_MAX_AGE
    baseline: str = ""  # what this run judged against (Baseline.key), kept with a full result
    partial: bool = False  # a --check subset

    def recheck(self, locked: bool) -> tuple[str, list[str]]:
        """Right before the node action, under the node's lock (`locked`): the hold and the fault codes this run
        re-checked, with the kept full result read again (a full check may have kept a failure since this run
        read it: a pass then lifts nothing)."""
        if self.quick:
            self.fold = last_full.fold(*last_full.recall(self.node), max_age=self.max_age, baseline=self.baseline)
        elif self.partial:
            self.partial_hold = _partial_hold(self.node)
        rechecked = sorted(set(rechecked_codes(self.records)) | set(self.fold.rechecked if self.fold else []))
        if not locked:
            return "another gpuval run held this node's lock: nothing lifted", rechecked
        if self.fold is not None and self.fold.status is Status.FAIL and not self.fold.hold:
            return (f"the last full check ({self.fold.run_id}) failed; only a full check that passes lifts its "
                    "drain"), rechecked
        return self.hold, rechecked

    def finish_saving(self) -> str:
        """Write what `run_health(defer_store=True)` left for after the node action; "" or what failed."""
        return self.saving.finish(self.records, self.quick)

    @property
    def ctx(self) -> CheckContext:
        return self.suite.ctx

    @property
    def verdict(self) -> NodeVerdict:
        """THE node verdict over this run's records (a quick run's kept full check included)."""
        return node_verdict(self.records)

    @property
    def exit_code(self) -> int:
        """The exit contract: 0 pass or warn, 1 any fail (the last full check's included), 2 a check that applies
        could not run or nothing was judged (and nothing failed)."""
        return self.verdict.exit_code

    def action_run_id(self) -> str:
        """The run id a drain names: this run's, unless only the kept full check failed (its records are there)."""
        own_failure = any(r.status is Status.FAIL and r.name != LAST_FULL for r in self.records)
        if self.fold is not None and self.fold.status is Status.FAIL and not own_failure:
            return self.fold.run_id
        return self.records[0].run_id if self.records else ""

    @property
    def hold(self) -> str:
        """Why this run's PASS or WARN must not lift gpuval's drain ("" when it may)."""
        return self.fold.hold if self.fold else self.partial_hold


@dataclass
class Saving:
    """Where a run's records go, and when. Without `defer`: each record to the JSON Lines file and the store as
    its check ends. With `defer` (`health --drain`: act on the node first), only to the JSON Lines file as each
    check ends, and a failed write (a full disk) is kept as `problem`, never an end to the run; the store, which
    another writer may hold locked for minutes, is written by `finish`, after the node action."""

    results: Path | None
    defer: bool = False
    problem: str = ""
    logged: int = 0  # records already in the JSON Lines file

    def check_done(self, records: list[Result]) -> None:
        """One check's record, as the check ends."""
        if not self.defer:
            save_results(records[-1:], self.results)
        elif not self.problem:
            try:
                append_jsonl(records[-1:], self.results)
                self.logged = len(records)
            except OSError as exc:
                self.problem = f"{exc.filename or self.results}: {exc.strerror or exc}"

    def finish(self, records: list[Result], quick: bool) -> str:
        """The deferred writes, after the node action; returns what could not be written ("" when all was)."""
        if not self.defer or (quick and self.results is None):  # a quick run saves only where asked
            return self.problem
        try:
            target = append_jsonl(records[self.logged:], self.results)
        except OSError as exc:
            return self.problem or f"{exc.filename or self.results}: {exc.strerror or exc}"
        store_results(records, target)
        return self.problem


def quick_checks(names: list[str] | None) -> list[Check]:
    """The checks of a quick run: those named (all by default) but the measuring ones; naming one is an error."""
    chosen = select(names)
    measuring = [c.name for c in chosen if c.name in MEASURING]
    if names and measuring:
        raise UsageError(f"--quick only reads: {measuring[0]} measures (run it without --quick)")
    return [c for c in chosen if c.name not in MEASURING]


def _where(ctx: CheckContext) -> Where:
    """This machine, with the SKU and GPUs of what was judged (a recording's, when one was)."""
    try:
        gpus = ctx.inventory().gpus
        model, count = (gpus[0].name if gpus else None), len(gpus)
    except HardwareUnavailable:
        model, count = None, 0
    return this_host(engine="local", sku=ctx.sku, gpu_model=model, gpu_count=count)


def _last_full_result(fold: last_full.Fold) -> CheckResult:
    """The node's last full check as the quick run's one more CheckResult (then a record like every check's)."""
    full = fold.last
    return CheckResult(name=LAST_FULL, status=fold.status, fault_code=" ".join(fold.codes) or "LAST_FULL",
                       value=full.verdict.value if full else None, expected="pass", reason=fold.reason,
                       details=fold.details())


def _keep(run: HealthRun) -> None:
    """A full run keeps its verdict on the node; a failure to write it is said, never fatal (the run is done)."""
    try:
        run.kept = last_full.remember(run.records, run.node, baseline=run.baseline)
        if run.kept is None:
            verdict = run.verdict.status.value
            run.kept_note = f"not replaced: this run's verdict ({verdict}) says nothing about the hardware"
    except OSError as exc:
        run.kept_note = f"not kept: {exc.filename or last_full.state_dir()}: {exc.strerror or exc}"
    except UsageError as exc:  # the host name is no node name: nothing to key the result by
        run.kept_note = f"not kept: {exc}"


def _partial_hold(node: str) -> str:
    """A run of some checks only (--check) judged part of the node: while the kept full check failed (or cannot be
    read), its pass must not lift gpuval's drain; only a full check that passes does."""
    last, problem = last_full.recall(node)
    if problem:
        return f"only some checks ran and the last full result cannot be read ({problem})"
    if last is not None and last.verdict is Status.FAIL:
        return (f"only some checks ran and the last full check ({last.run_id}) failed; only a full check that "
                "passes lifts its drain")
    return ""


@dataclass(frozen=True)
class HealthRequest:
    """What one health run is asked to do.

    `recorded`: judge a recording (a packaged SKU or a YAML file) on its recorded figures instead of this machine
    (which measures with torch). `sku`: else the recording's, else GPUVAL_SKU or Azure IMDS. `checks`: the checks
    to run (None: all, a full run). `node`: the scheduler's name of this node [default: SLURMD_NODENAME, else the
    host name], whose last full result a full run keeps and a quick run reads (`max_age`: older is reported, not
    judged). `since` starts the xid window (default: the last pass on this machine, else boot); `dcgm` runs dcgmi
    diag at that level (added to the checks named). `results`: where each record is saved (None: the default log).
    A measuring check on a GPU another process uses is not judged (GPU_BUSY; `allow_busy`: measured and reported,
    workloads.health.busy). `defer_store`: see `Saving` (the caller then calls `finish_saving` after acting on the
    node)."""

    run_id: str
    recorded: str | None = None
    sku: str | None = None
    checks: tuple[str, ...] | None = None
    baselines: tuple[Path, ...] = ()
    results: Path | None = None
    repeats: int = 3
    quick: bool = False
    node: str | None = None
    max_age: timedelta = last_full.DEFAULT_MAX_AGE
    since: datetime | None = None
    dcgm: int | None = None
    allow_busy: bool = False
    defer_store: bool = False


def _measurer(req: HealthRequest, machine: Machine) -> Measurer:
    """Nothing measured in a quick run, a recording's figures, else torch on this machine's GPUs."""
    if req.quick:
        return NoMeasurement()
    if isinstance(machine, RecordedMachine):
        return RecordedMeasurer(machine.measurements, machine.description)
    return TorchMeasurer(req.run_id, str(req.results) if req.results else None)


def run_health(req: HealthRequest, on_context: Callable[[CheckContext], None] = lambda _ctx: None,
               on_result: Callable[[CheckResult], None] = lambda _r: None) -> HealthRun:
    """Run the checks `req` names (all by default) on this machine or a recording; `on_context` is told the
    context before the first check, `on_result` each check's result as it ends."""
    recorded, quick, run_id, results = req.recorded, req.quick, req.run_id, req.results
    checks, node = list(req.checks or []) or None, req.node
    named = node is not None  # a recording is kept as a node's full result only for a node named with --node
    node = check_node(node) if node else this_node()  # a host name unfit as a file name: said when kept
    checks = [*checks, "dcgm_diag"] if checks and req.dcgm and "dcgm_diag" not in checks else checks
    chosen = quick_checks(checks) if quick else select(checks)
    machine = open_machine(recorded)
    own_sku = machine.sku if isinstance(machine, RecordedMachine) else None
    ctx = make_context(machine, req.sku or own_sku or this_sku(), req.baselines,
                       _measurer(req, machine), repeats=req.repeats, since=req.since, dcgm_level=req.dcgm,
                       xid_mark=None if recorded else PassMark())
    on_context(ctx)
    started = datetime.now(timezone.utc)
    params = {"baseline": ctx.baseline.files if ctx.baseline else [], "machine": machine.description,
              "gpuval": __version__,  # which gpuval measured: a learned baseline's provenance
              **({"quick": True} if quick else {})}
    where = _where(ctx)
    records: list[Result] = []
    saving = Saving(results, req.defer_store)

    def record(result: CheckResult) -> None:
        records.append(health_record(result, where, run_id, started, params))
        if not quick:  # measured figures are saved as each check ends; a quick run saves once, where asked
            saving.check_done(records)
        on_result(result)

    guarded = MeasuringGuard(req.allow_busy).wrap(chosen)
    run = HealthRun(run_suite(ctx, guarded, record), records, node=node, quick=quick, saving=saving,
                    max_age=req.max_age, baseline=ctx.limits.key,
                    partial=bool(checks))
    if quick:  # a kept FAIL judged by another SKU's figures is reported, not judged (baseline)
        run.fold = last_full.fold(*last_full.recall(node), max_age=req.max_age, baseline=run.baseline)
        record(_last_full_result(run.fold))
        if results is not None and not req.defer_store:
            save_results(records, results)
    elif not checks and recorded and not named:  # a recording judged here is no claim about this machine
        run.kept_note = "not kept: a recording says nothing about this machine (--node names the node it stands for)"
    elif not checks:  # every check ran: a full run
        _keep(run)
    return run  # a --check subset reads its hold right before the node action (recheck), not here
