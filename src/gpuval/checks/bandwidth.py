"""Checks of GPU memory paths: copy-engine bandwidth between every pair of GPUs (NVLink / NVSwitch, or PCIe), and
each GPU's device memory (HBM) bandwidth. Every figure names its GPUs by NVML index and PCI bus id; the slowest
pair or GPU is named in the reason.

GPU-to-GPU copies follow nvbandwidth: `read` is the copy run by the destination GPU's copy engine reading from its
peer (device_to_device_memcpy_read_ce, what AzNHC's check_gpu_bw judges at 235 GB/s on NDv4 and 335 GB/s on NDv5),
`write` the copy run by the source writing into its peer (..._write_ce). Device memory: a device-to-device memcpy
(as CUDA's bandwidthTest D2D, SuperBench's mem-bw) and a triad kernel (as BabelStream Triad); each SKU's baseline
judges the one its published figure measured.
"""

from __future__ import annotations

from typing import Callable

from gpuval.checks.base import (
    Check, CheckContext, CheckResult, MeasurementUnavailable, NotApplicable, check, not_judged, worst,
)
from gpuval.checks.measured import (
    HbmFigure, PeerFigure, gpu_row, measure_each, measurer_of, targets, unmeasured,
)
from gpuval.results.model import Status

SHOWN = 3  # findings named in a reason; the rest are counted


def _cap(findings: list[tuple[Status, str]]) -> list[tuple[Status, str]]:
    """The findings of the worst status, at most SHOWN of them named, the others counted."""
    if not findings:
        return findings
    top, _ = worst(findings)
    mine = [f for f in findings if f[0] is top]
    return mine[:SHOWN] + ([(top, f"and {len(mine) - SHOWN} more")] if len(mine) > SHOWN else [])


def _shown(status: Status, reason: str, summary: str) -> str:
    """The reason a result shows: the findings with the summary after them, the summary alone when all is well,
    the skip's reason as it is."""
    if status is Status.SKIPPED:
        return reason
    return f"{reason} ({summary})" if reason else summary


def _pair(f: PeerFigure) -> str:
    return f"{f.dst.label()} <- {f.src.label()}"


@check("p2p_bandwidth", "P2P_SLOW")
def p2p_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Copy-engine bandwidth of every ordered GPU pair (read and write, as nvbandwidth); the slowest pair named."""
    chosen, notes = targets(ctx)
    if len(chosen) < 2:
        raise NotApplicable(f"one GPU ({chosen[0].label()}): no pair to measure")
    figures: list[PeerFigure] = measurer_of(ctx).p2p_bandwidth(chosen)
    notes += unmeasured(chosen, [f.src for f in figures] + [f.dst for f in figures])
    if not figures:
        raise MeasurementUnavailable("no GPU pair measured" + "".join(f"; {n}" for n in notes))
    band = ctx.limits.band("p2p_read_gbps")
    findings: list[tuple[Status, str]] = []
    for f in figures:
        if f.read is None and f.write is None:
            if band is not None:  # this SKU's GPUs reach each other over NVLink: no peer access is a fault
                findings.append((Status.FAIL, f"{_pair(f)}: no peer access"))
            continue
        for metric, value, word in (("p2p_read_gbps", f.read, "read"), ("p2p_write_gbps", f.write, "write")):
            judged = ctx.limits.judge(metric, value) if value is not None else None
            if judged and judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"{_pair(f)} {word}: {judged.reason}"))
    reads = [f for f in figures if f.read is not None]
    writes = [f for f in figures if f.write is not None]
    slow = min(reads, key=lambda f: f.read) if reads else None  # type: ignore[arg-type, return-value]
    slow_w = min(writes, key=lambda f: f.write) if writes else None  # type: ignore[arg-type, return-value]
    summary = (f"slowest pair {_pair(slow)} read {slow.read:.1f} GB/s" if slow else "no pair could read its peer")
    if slow_w:
        summary += f", slowest write {slow_w.write:.1f} GB/s ({_pair(slow_w)})"
    summary += f" over {len(figures)} pairs (copy engine)"
    status, reason = worst(_cap(findings))
    if band is None and not findings:
        status, reason = Status.SKIPPED, f"{summary}: {not_judged(ctx)}"
    matrix = {f"{f.dst.index}<-{f.src.index}": [f.read, f.write] for f in figures}
    if band is not None and not reads and not findings:  # the figure the SKU is judged on was not measured
        status, reason = Status.SKIPPED, f"{summary}: read not measured (no CUDA runtime to call here), not judged"
    return me.result(status, slow.read if slow else None, band.expected if band else None, "GB/s",
                     _shown(status, reason, summary) + "".join(f"; {n}" for n in notes),
                     slowest=_pair(slow) if slow else None, read_write_gbps=matrix,
                     gpus=[g.label() for g in chosen])


@check("hbm_bandwidth", "HBM_SLOW")
def hbm_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Device memory (HBM) bandwidth per GPU: a device-to-device memcpy and a triad kernel; the slowest GPU named."""
    figures, notes = measure_each(ctx, lambda m, gpus: m.hbm_bandwidth(gpus), lambda f: f.gpu)
    findings: list[tuple[Status, str]] = []
    judged_by: list[str] = []
    for metric, label, get in (("hbm_memcpy_gbps", "memcpy", lambda f: f.memcpy),
                               ("hbm_triad_gbps", "triad", lambda f: f.triad)):
        if all(ctx.limits_for(f.gpu.index).band(metric) is None for f in figures) or all(get(f) is None
                                                                                        for f in figures):
            continue
        judged_by.append(metric)
        for f in figures:
            value = get(f)
            if value is None:
                continue
            judged = ctx.limits_for(f.gpu.index).judge(metric, value)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"{f.gpu.label()} {label}: {judged.reason}"))
    summary = ", ".join(_slowest(figures, label, get) for label, get in (("memcpy", lambda f: f.memcpy),
                                                                         ("triad", lambda f: f.triad))
                        if any(get(f) is not None for f in figures))
    status, reason = worst(_cap(findings))
    if not judged_by:
        status, reason = Status.SKIPPED, f"{summary}: {not_judged(ctx)}"
    # the figure shown: the triad where a band judges it (BabelStream's, the one most published), else the other
    metric = ("hbm_triad_gbps" if "hbm_triad_gbps" in judged_by else
              (judged_by or ["hbm_memcpy_gbps" if figures[0].memcpy is not None else "hbm_triad_gbps"])[0])
    band = ctx.limits.band(metric)
    values = [v for f in figures if (v := (f.memcpy if metric == "hbm_memcpy_gbps" else f.triad)) is not None]
    return me.result(status, min(values) if values else None, band.expected if band else None, "GB/s",
                     _shown(status, reason, summary) + "".join(f"; {n}" for n in notes), judged=judged_by,
                     gpus=[gpu_row(f.gpu, memcpy=_round(f.memcpy), triad=_round(f.triad)) for f in figures])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _slowest(figures: list[HbmFigure], label: str, get: Callable[[HbmFigure], float | None]) -> str:
    """'slowest triad 2970 GB/s (GPU 3 (...))' over the GPUs that have the figure."""
    have = [f for f in figures if get(f) is not None]
    low = min(have, key=lambda f: get(f))  # type: ignore[arg-type, return-value]
    return f"slowest {label} {get(low):.0f} GB/s ({low.gpu.label()})"
