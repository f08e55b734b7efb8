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

import math

from gpuval.baselines.model import finite
from gpuval.checks.base import (
    Check, CheckContext, CheckResult, MeasurementUnavailable, NotApplicable, check, why_not_judged,
)
from gpuval.checks.measured import (
    GpuRef, HbmFigure, PeerFigure, gpu_row, measure_each, measurer_of, targets, unmeasured,
)
from gpuval.checks.peers import Figure, Verdicts, apart, shown
from gpuval.results.model import Status

SHOWN = 3  # findings named in a reason; the rest are counted


def _pair(f: PeerFigure) -> str:
    return f"{f.dst.label()} <- {f.src.label()}"


def _paths_apart(ctx: CheckContext, chosen: list[GpuRef]) -> str:
    """Why GPU pairs are not judged against each other ("" where they are): only where every pair is the same path
    by design, GPUs of an SXM model with NVLink 3 or later on the board (NVSwitch, or all-to-all on a 4-GPU board)
    that each report their links. PCIe boards (pairs across sockets differ, bridged pairs are faster) and a V100
    cube mesh (pairs of two, one or no links) have pairs of different paths."""
    model = ctx.limits.gpu.model if ctx.limits.gpu is not None else None
    links = {g.index: g.nvlink_active for g in ctx.inventory().gpus}
    if (model is not None and model.nvlink.get("links") and int(model.nvlink.get("generation", 0)) >= 3
            and all(any(links.get(g.index) or []) for g in chosen)):
        return ""
    return "GPU pairs over different paths by design (PCIe, bridges, a cube mesh): not judged against peers"


@check("p2p_bandwidth", "P2P_SLOW")
def p2p_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Copy-engine bandwidth of every ordered GPU pair (read and write, as nvbandwidth): each pair by its band and
    against the node's other pairs where all are the same path; the slowest pair named."""
    chosen, notes = targets(ctx)
    if len(chosen) < 2:
        raise NotApplicable(f"one GPU ({chosen[0].label()}): no pair to measure")
    figures: list[PeerFigure] = measurer_of(ctx).p2p_bandwidth(chosen)
    notes += unmeasured(chosen, [f.src for f in figures] + [f.dst for f in figures])
    if not figures:
        raise MeasurementUnavailable("no GPU pair measured" + "".join(f"; {n}" for n in notes))
    band = ctx.limits.band("p2p_read_gbps")
    verdicts = Verdicts()
    for f in figures:
        if f.read is None and f.write is None and band is not None:  # its GPUs reach each other over NVLink
            verdicts.add("band", Status.FAIL, f"{_pair(f)}: no peer access")
    why_not = apart(ctx, [g.index for g in chosen]) or _paths_apart(ctx, chosen)
    for metric, word in (("p2p_read_gbps", "read"), ("p2p_write_gbps", "write")):
        verdicts.judge(ctx, metric, word, [Figure(_pair(f), f.dst.index, getattr(f, word)) for f in figures], "GB/s",
                       why_not=why_not)
    reads = [f for f in figures if f.read is not None]
    writes = [f for f in figures if f.write is not None]
    slow = min(reads, key=lambda f: f.read) if reads else None  # type: ignore[arg-type, return-value]
    slow_w = min(writes, key=lambda f: f.write) if writes else None  # type: ignore[arg-type, return-value]
    summary = (f"slowest pair {_pair(slow)} read {slow.read:.1f} GB/s" if slow else "no pair could read its peer")
    if slow_w:
        summary += f", slowest write {slow_w.write:.1f} GB/s ({_pair(slow_w)})"
    summary += f" over {len(figures)} pairs (copy engine)"
    status, reason = verdicts.verdict(SHOWN)
    reason = shown(reason, f"{summary}; {verdicts.said(why_not_judged(ctx))}")
    if band is not None and not reads and status is Status.PASS:  # the figure the SKU is judged on: not measured
        status, reason = Status.SKIPPED, f"{summary}: read not measured (no CUDA runtime to call here), not judged"
    matrix = {f"{f.dst.index}<-{f.src.index}": [f.read, f.write] for f in figures}
    return me.result(status, slow.read if slow else None, band.expected if band else None, "GB/s",
                     reason + "".join(f"; {n}" for n in notes), slowest=_pair(slow) if slow else None,
                     read_write_gbps=matrix, gpus=[gpu_row(g) for g in chosen], judged_by=verdicts.details())


@check("hbm_bandwidth", "HBM_SLOW")
def hbm_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Device memory (HBM) bandwidth per GPU, a device-to-device memcpy and a triad kernel: each GPU by its band,
    the floor under its datasheet peak and against its peers; the slowest GPU named."""
    figures, notes = measure_each(ctx, lambda m, gpus: m.hbm_bandwidth(gpus), lambda f: f.gpu)
    verdicts = Verdicts()
    banded: list[str] = []
    for metric, label in (("hbm_memcpy_gbps", "memcpy"), ("hbm_triad_gbps", "triad")):
        verdicts.judge(ctx, metric, label, [Figure(f.gpu.label(), f.gpu.index, getattr(f, label)) for f in figures],
                       "GB/s")
        if any(ctx.limits_for(f.gpu.index).band(metric) and getattr(f, label) is not None for f in figures):
            banded.append(metric)
    summary = ", ".join(_slowest(figures, label) for label in ("memcpy", "triad")
                        if any(getattr(f, label) is not None for f in figures))
    status, reason = verdicts.verdict(SHOWN)
    # the figure shown: the triad where a band judges it (BabelStream's, the one most published), else the other
    metric = ("hbm_triad_gbps" if "hbm_triad_gbps" in banded else
              (banded or ["hbm_memcpy_gbps" if figures[0].memcpy is not None else "hbm_triad_gbps"])[0])
    band = ctx.limits.band(metric)
    values = [v for f in figures if (v := (f.memcpy if metric == "hbm_memcpy_gbps" else f.triad)) is not None]
    return me.result(status, min(values) if values else None, band.expected if band else None, "GB/s",
                     shown(reason, f"{summary}; {verdicts.said(why_not_judged(ctx))}")
                     + "".join(f"; {n}" for n in notes), judged=banded, judged_by=verdicts.details(),
                     gpus=[gpu_row(f.gpu, memcpy=_round(f.memcpy), triad=_round(f.triad)) for f in figures])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _slowest(figures: list[HbmFigure], label: str) -> str:
    """'slowest triad 2970 GB/s (GPU 3 (...))' over the GPUs that have the figure."""
    have = [f for f in figures if getattr(f, label) is not None]
    low = min(have, key=lambda f: getattr(f, label) if finite(getattr(f, label)) else math.inf)
    return f"slowest {label} {getattr(low, label):.0f} GB/s ({low.gpu.label()})"
