"""Checks that measure the GPUs: host<->device copies, a GEMM burst, NCCL all_reduce in the node and through the
HCAs. (GPU-to-GPU and device memory bandwidth: gpuval.checks.bandwidth; sustained load: gpuval.checks.load.)

The measurements come from the context's measurer: `gpuval.workloads.health.measurer.TorchMeasurer` on a real node
(torch on CUDA; all_reduce through gpuval's own collective bench), `RecordedMeasurer` here with a recording's
published figures, so the verdicts are tested without a GPU. Every per-GPU figure names its GPU by NVML index and
PCI bus id. Without GPUs these checks are skipped, GPUs in MIG mode are left out with the reason; with GPUs that
torch cannot measure (torch missing, a CPU-only build, CUDA failing to start, a rank that crashed) they are errors,
with the reason.
"""

from __future__ import annotations

import math
from typing import Mapping

from gpuval.baselines.model import finite
from gpuval.checks.base import (
    AllreduceMeasurement, Check, CheckContext, CheckResult, MeasurementUnavailable, NotApplicable, check, not_judged,
    why_not_judged,
)
from gpuval.checks.fabric import expected_hcas, fabric_ports, hidden_by_container, loopback_env
from gpuval.checks.measured import (  # noqa: F401  (RecordedMeasurer: where tests and the health run take it)
    CopyFigure, GpuRef, RecordedMeasurer, gpu_row, measure_each, measurer_of, placed_summary, targets, unmeasured,
)
from gpuval.checks.peers import Figure, Verdicts, shown
from gpuval.collectives.nccl_debug import read_nccl_network
from gpuval.collectives.sizes import format_size
from gpuval.results.model import Status

COPY_BYTES = 512 * 1024**2  # pinned host<->device copy size (nvbandwidth's default buffer)
GEMM_N = 8192  # square GEMM size of the TFLOPS checks
DEFAULT_ALLREDUCE_BYTES = 1024**3  # when the SKU's baseline names no size
AVG_SIDES = ("mean of out-of-place and in-place (nccl-tests' Avg bus bandwidth at one size, the figure AzNHC "
             "judges)")


def _notes(notes: list[str]) -> str:
    return "".join(f"; {n}" for n in notes)


# (metric, CopyFigure field, words): alone, then with every GPU copying at once
COPIES = (("h2d_gbps", "h2d", "H2D"), ("d2h_gbps", "d2h", "D2H"),
          ("h2d_all_gbps", "h2d_all", "H2D with every GPU copying"),
          ("d2h_all_gbps", "d2h_all", "D2H with every GPU copying"))


@check("h2d_d2h_bandwidth", "H2D_D2H_SLOW")
def h2d_d2h_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Pinned host<->device copy bandwidth per GPU from its own NUMA node, alone and all GPUs at once: each GPU by
    its link's band, the floor under its link's rate (alone) and against its peers."""
    figures, notes = measure_each(ctx, lambda m, gpus: m.copy_bandwidth(gpus), lambda f: f.gpu)
    verdicts = Verdicts()
    for metric, field, label in COPIES:  # each GPU by its own link's band; never rounded first
        verdicts.judge(ctx, metric, label, [Figure(f.gpu.label(), f.gpu.index, getattr(f, field)) for f in figures],
                       "GB/s")
    low_h2d = min(figures, key=lambda f: f.h2d if finite(f.h2d) else math.inf)
    low_d2h = min(figures, key=lambda f: f.d2h if finite(f.d2h) else math.inf)
    together = [f for f in figures if f.h2d_all is not None and f.d2h_all is not None]
    summary = (f"slowest H2D {low_h2d.h2d:.1f} GB/s ({low_h2d.gpu.label()}), D2H {low_d2h.d2h:.1f} GB/s "
               f"({low_d2h.gpu.label()})")
    if together:
        summary += (f"; all GPUs at once: H2D {min(f.h2d_all for f in together):.1f}, "  # type: ignore[type-var]
                    f"D2H {min(f.d2h_all for f in together):.1f} GB/s")  # type: ignore[type-var]
    summary += f" (pinned, {format_size(COPY_BYTES)}, {placed_summary(figures)})"
    status, reason = verdicts.verdict()
    reason = shown(reason, f"{summary}; {verdicts.said(why_not_judged(ctx))}")
    if status is not Status.SKIPPED and ctx.inventory().confidential_compute:  # encrypted through bounce buffers
        status, reason = Status.SKIPPED, (f"{summary}: confidential compute is on, copies to and from the host are "
                                          "encrypted and slower by design: reported, not judged")
    band = ctx.limits.band("h2d_gbps")
    return me.result(status, low_h2d.h2d, band.expected if band else None, "GB/s", reason + _notes(notes),
                     gpus=[gpu_row(f.gpu, h2d=round(f.h2d, 2), d2h=round(f.d2h, 2),
                                   h2d_all=None if f.h2d_all is None else round(f.h2d_all, 2),
                                   d2h_all=None if f.d2h_all is None else round(f.d2h_all, 2), placed=f.placed)
                           for f in figures], judged_by=verdicts.details())


@check("gemm_tflops", "GEMM_SLOW")
def gemm_tflops(ctx: CheckContext, me: Check) -> CheckResult:
    """Dense GEMM burst throughput in bf16 and fp16 per GPU: each GPU by its band, the floor under its datasheet peak
    and against its peers; the slowest GPU named."""
    chosen, notes = targets(ctx)
    measurer = measurer_of(ctx)
    verdicts, lowest, slowest = Verdicts(), {}, {}
    measured: dict[int, tuple[GpuRef, dict[str, float]]] = {}
    missing: list[NotApplicable | MeasurementUnavailable] = []
    for dtype in ("bf16", "fp16"):
        try:
            per_gpu = measurer.gemm_tflops(dtype, chosen)
        except (NotApplicable, MeasurementUnavailable) as exc:
            missing.append(exc)
            continue
        if not per_gpu:
            missing.append(MeasurementUnavailable(f"{dtype}: no GPU measured"))
            continue
        for g, value in per_gpu:
            measured.setdefault(g.index, (g, {}))[1][dtype] = round(value, 2)
        slowest[dtype], lowest[dtype] = min(per_gpu, key=lambda p: p[1] if finite(p[1]) else math.inf)
        verdicts.judge(ctx, f"gemm_{dtype}_tflops", dtype, [Figure(g.label(), g.index, v) for g, v in per_gpu],
                       "TFLOPS")
        notes += [n for n in unmeasured(chosen, [g for g, _ in per_gpu]) if n not in notes]
    if not lowest:  # could not run (error) wins over not recorded (skipped)
        kind = MeasurementUnavailable if any(isinstance(e, MeasurementUnavailable) for e in missing) else NotApplicable
        raise kind("; ".join(dict.fromkeys(map(str, missing))))  # bf16 and fp16 fail alike: said once
    status, reason = verdicts.verdict()
    key = "fp16" if "fp16" in lowest else "bf16"
    band = ctx.limits_for(slowest[key].index).band(f"gemm_{key}_tflops")
    summary = ", ".join(f"{d} {v:.0f} TFLOPS ({slowest[d].label()})" for d, v in lowest.items())
    return me.result(status, lowest[key], band.expected if band else None, "TFLOPS",
                     shown(reason, f"slowest: {summary} ({GEMM_N}x{GEMM_N}, a burst); "
                                    f"{verdicts.said(why_not_judged(ctx))}") + _notes(notes),
                     gpus=[gpu_row(g, **values) for _, (g, values) in sorted(measured.items())],
                     judged_by=verdicts.details())


def one_gpu_reason(ctx: CheckContext, metric: str) -> str:
    """Why an all_reduce is not measured on one GPU (NCCL's one-rank all_reduce moves nothing: busbw is 0 by
    definition), and, where the SKU names a figure for more GPUs, that this figure cannot be judged."""
    reason = "one GPU: no all_reduce between GPUs (busbw is 0 by definition with one rank)"
    band, gpus = ctx.limits.band(metric), ctx.limits.band("gpu_count")
    if ctx.baseline is not None and band is not None and band.expected is not None:
        over = f"{gpus.expected:g} GPUs" if gpus and gpus.expected else "more GPUs"
        reason += (f"; the {ctx.baseline.sku} figure ({band.expected:g} {band.unit}) is for {over}: it cannot be "
                   "judged here (gpu_count says what is missing)")
    return reason


def _allreduce_check(ctx: CheckContext, me: Check, metric: str, env: Mapping[str, str],
                     what: str) -> tuple[CheckResult, AllreduceMeasurement]:
    chosen, notes = targets(ctx)
    if len(chosen) < 2:
        raise NotApplicable(one_gpu_reason(ctx, metric) + _notes(notes))
    band = ctx.limits.band(metric)
    size = int(band.size_bytes) if band and band.size_bytes else DEFAULT_ALLREDUCE_BYTES
    measured = measurer_of(ctx).allreduce_busbw(size, chosen, ctx.repeats, env)
    busbw = measured.busbw  # judged as measured: 227.996 is under 228, whatever two decimals would show
    judged = ctx.limits.judge(metric, busbw)
    status, reason = judged.status, judged.reason
    if measured.wrong:  # a fast but wrong all_reduce is broken hardware or software, whatever its bandwidth
        status, reason = Status.FAIL, f"{measured.wrong} wrong element(s) in the result check ({busbw:g} GB/s)"
    elif judged.status is Status.SKIPPED:
        reason = f"{busbw:.1f} GB/s: {not_judged(ctx)}"
    ranks = measured.ranks or len(chosen)
    return me.result(status, busbw, judged.expected, "GB/s",
                     f"{what} at {format_size(size)}, {AVG_SIDES}, best of {ctx.repeats} over {ranks} GPUs: "
                     f"{reason}{_notes(notes)}", size_bytes=size, ranks=ranks, gpus=measured.gpus,
                     env={k: v for k, v in env.items() if not k.startswith("NCCL_DEBUG")},
                     wrong=measured.wrong), measured


@check("nccl_allreduce_node", "NCCL_NODE_SLOW")
def nccl_allreduce_node(ctx: CheckContext, me: Check) -> CheckResult:
    """NCCL all_reduce bus bandwidth over this node's GPUs at the SKU's named size, best of N runs."""
    return _allreduce_check(ctx, me, "allreduce_busbw_gbps", {}, "all_reduce busbw")[0]


def _off_fabric(log: str | None) -> str | None:
    """Why the loopback's figure is not the HCAs' (channels over P2P/SHM, NVLS or CollNet in use), from NCCL's
    own lines; None when every channel went through the network, or when there is no log to tell."""
    net = read_nccl_network(log) if log else None
    if net is None:
        return None
    other = sorted(k for k in net.paths if not k.startswith("NET"))
    used = [a for a in net.algorithms if a.startswith(("NVLS", "CollNet"))]
    if net.collnet is True and not any(a.startswith("CollNet") for a in used):
        used.append("CollNet")  # in-network reductions (SHARP): the HCAs did not carry the whole all_reduce
    if other or used:
        return f"NCCL used {', '.join(other + used)} besides the network ({net.path_summary})"
    return None


@check("nccl_ib_loopback", "NCCL_IB_SLOW")
def nccl_ib_loopback(ctx: CheckContext, me: Check) -> CheckResult:
    """NCCL all_reduce with shared memory, P2P, NVLS and CollNet off (Ring), so every byte crosses the HCAs."""
    if not fabric_ports(ctx):
        ctx.gpus_present()
        hidden = hidden_by_container(ctx) if expected_hcas(ctx) else None
        if hidden:  # the SKU's HCAs are there, only not in here: could not run, never "nothing to loop through"
            return me.result(Status.ERROR, reason=f"could not run: {ctx.sku} has {expected_hcas(ctx)} HCAs, none is "
                                                  f"visible here: {hidden} (not visible in this container)")
        return me.result(Status.SKIPPED, reason="no InfiniBand or RoCE port on this machine: nothing to loop back "
                                                "through")
    env = loopback_env(ctx)
    result, measured = _allreduce_check(ctx, me, "ib_loopback_busbw_gbps", env, "IB-only all_reduce busbw")
    off = _off_fabric(measured.log)
    if off and result.status is not Status.FAIL:  # a figure of another path is no verdict on the HCAs
        result.status = Status.ERROR
        result.reason = f"could not run an IB-only all_reduce: {off}; {result.reason}"
    result.details["topology_file"] = env.get("NCCL_TOPO_FILE")
    return result
