"""`gpuval validate`'s judgement: the sweep against the SKU's baseline at its named size, and one verdict over
the sweep and the health checks that says what it rests on."""

from __future__ import annotations

from gpuval.baselines import Baseline
from gpuval.checks.base import CheckResult
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Table
from gpuval.results import Status

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
