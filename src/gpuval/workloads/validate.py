"""`gpuval validate`'s judgement: the sweep against the SKU's baseline at its named size, and one verdict over
the sweep and the health checks that says what it rests on."""

from __future__ import annotations

from typing import Any

from gpuval.checks.base import CheckResult
from gpuval.collectives.sizes import format_size
from gpuval.collectives.table import Table

CPU_TOP_BYTES = 64 * 1024**2  # a CPU sweep that ends in well under a minute
GPU_TOP_BYTES = 1024**3  # GPUs without a baseline size


def sweep_top(baseline: Any, gpus: int) -> int:
    """The largest all_reduce size: the baseline's named size on GPUs (judged there), else 1 GiB; 64 MiB on CPU."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if gpus and band and band.size_bytes:
        return int(band.size_bytes)
    return GPU_TOP_BYTES if gpus else CPU_TOP_BYTES


def judge_sweep(table: Table, baseline: Any) -> tuple[str, str]:
    """(status, line) for the sweep against the SKU's all_reduce band, judged only at the band's named size."""
    band = baseline.band("allreduce_busbw_gbps") if baseline else None
    if band is None:
        return "skipped", "no all_reduce baseline for this machine: figures are reported, not judged"
    row = next((r for r in table.rows if r.size == band.size_bytes), None)
    if row is None:
        return "skipped", (f"the {baseline.sku} baseline is at {format_size(int(band.size_bytes))}; "
                           f"this sweep stopped at {format_size(table.rows[-1].size)}: not judged (use -e)")
    judged = band.judge(round(row.best_busbw(), 2))
    return judged.status.value, f"all_reduce at {format_size(row.size)}: {judged.reason}"


def verdict(wrong: int, sweep_status: str, checks: list[CheckResult]) -> tuple[str, str]:
    """(verdict, what it rests on): fail on any failed check or wrong element; incomplete when something that
    applies could not run; pass only for what was judged, and it says what that was."""
    statuses = [r.status.value for r in checks]
    if wrong or sweep_status == "fail" or "fail" in statuses:
        return "fail", ""
    if "error" in statuses:
        return "incomplete", "some checks could not run (ERROR above): nothing failed, but the node is not cleared"
    judged = sum(s in ("pass", "warn") for s in statuses) + (sweep_status in ("pass", "warn"))
    if not judged:
        return "pass", "only the collective's data was checked (exact, 0 wrong elements): no GPU check applied " \
                       "and no baseline judged the bandwidth"
    return "pass", f"{judged} judged figures within their bands" + (" (with warnings)" if "warn" in statuses else "")
