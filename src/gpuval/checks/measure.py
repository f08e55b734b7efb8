"""Checks that measure the GPUs: copy bandwidth, GEMM, NCCL all_reduce in the node and through the HCAs.

The measurements come from the context's measurer: `gpuval.workloads.health.measurer.TorchMeasurer` on a real node
(torch on CUDA; all_reduce through gpuval's own collective bench), `RecordedMeasurer` here with a recording's
published figures, so the verdicts are tested without a GPU. Without GPUs these checks are skipped; with GPUs that
torch cannot measure (torch missing, a CPU-only build, a rank that crashed, nothing measured) they are errors, with
the reason.
"""

from __future__ import annotations

from typing import Mapping

from gpuval.checks.base import (
    AllreduceMeasurement, Check, CheckContext, CheckResult, MeasurementUnavailable, NotApplicable, check, worst,
)
from gpuval.checks.fabric import infiniband_ports
from gpuval.collectives.sizes import format_size
from gpuval.results.model import Status

# The IB-only NCCL run of reference.md: no shared memory, no NVLink/PCIe peer path, so every byte crosses an HCA.
IB_LOOPBACK_ENV = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "5"}
COPY_BYTES = 256 * 1024**2  # pinned host<->device copy size the bandwidth check measures with
GEMM_N = 8192  # square GEMM size of the TFLOPS check
DEFAULT_ALLREDUCE_BYTES = 1024**3  # when the SKU's baseline names no size


class RecordedMeasurer:
    """A recording's published figures (`measurements:` in its YAML), the same for every GPU; a figure the
    recording lacks makes its check not apply (skipped)."""

    def __init__(self, measurements: Mapping[str, object], description: str) -> None:
        self.m = dict(measurements)
        self.description = description

    def _get(self, key: str) -> float:
        if key not in self.m:
            raise NotApplicable(f"{self.description} has no recorded {key}")
        return float(self.m[key])  # type: ignore[arg-type]

    def copy_bandwidth(self, gpus: int) -> list[tuple[float, float]]:
        return [(self._get("h2d_gbps"), self._get("d2h_gbps"))] * gpus

    def gemm_tflops(self, dtype: str, gpus: int) -> list[float]:
        return [self._get(f"gemm_{dtype}_tflops")] * gpus

    def allreduce_busbw(self, size_bytes: int, ranks: int, repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        key = "ib_loopback" if env.get("NCCL_P2P_DISABLE") == "1" else "allreduce"
        return AllreduceMeasurement(self._get(f"{key}_busbw_gbps"), int(self.m.get(f"{key}_wrong", 0)))  # type: ignore[call-overload]

    def nccl_debug_log(self, ranks: int) -> str:
        if "nccl_debug_log" not in self.m:
            raise NotApplicable(f"{self.description} has no recorded NCCL_DEBUG=INFO log")
        return str(self.m["nccl_debug_log"])


def _measurer(ctx: CheckContext):  # type: ignore[no-untyped-def]
    if ctx.measurer is None:
        raise NotApplicable("no GPU measurer in this run")
    return ctx.measurer


@check("h2d_d2h_bandwidth", "H2D_D2H_SLOW")
def h2d_d2h_bandwidth(ctx: CheckContext, me: Check) -> CheckResult:
    """Host-to-device and device-to-host copy bandwidth with pinned memory, per GPU; the slowest GPU is judged."""
    gpus = ctx.gpus_present()
    per_gpu = _measurer(ctx).copy_bandwidth(gpus)
    findings = []
    for index, (h2d, d2h) in enumerate(per_gpu):
        for metric, value, label in (("h2d_gbps", h2d, "H2D"), ("d2h_gbps", d2h, "D2H")):
            judged = ctx.limits.judge(metric, value)  # never rounded before judging
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {index} {label}: {judged.reason}"))
    worst_h2d = min(h for h, _ in per_gpu)
    worst_d2h = min(d for _, d in per_gpu)
    band = ctx.limits.band("h2d_gbps")
    status, reason = worst(findings)
    if not findings and band is None:
        status, reason = Status.SKIPPED, "no baseline for this SKU: reported, not judged"
    return me.result(status, worst_h2d, band.expected if band else None, "GB/s",
                     reason or f"slowest GPU: H2D {worst_h2d:.1f}, D2H {worst_d2h:.1f} GB/s (pinned, "
                               f"{format_size(COPY_BYTES)})",
                     h2d=[round(h, 2) for h, _ in per_gpu], d2h=[round(d, 2) for _, d in per_gpu])


@check("gemm_tflops", "GEMM_SLOW")
def gemm_tflops(ctx: CheckContext, me: Check) -> CheckResult:
    """Dense GEMM throughput in bf16 and fp16 per GPU; the slowest GPU is judged where the SKU has a baseline."""
    gpus = ctx.gpus_present()
    measurer = _measurer(ctx)
    findings, lowest, measured = [], {}, {}
    missing: list[NotApplicable | MeasurementUnavailable] = []
    for dtype in ("bf16", "fp16"):
        try:
            per_gpu = measurer.gemm_tflops(dtype, gpus)
        except (NotApplicable, MeasurementUnavailable) as exc:
            missing.append(exc)
            continue
        measured[dtype] = [round(v, 1) for v in per_gpu]
        lowest[dtype] = min(per_gpu)
        judged = ctx.limits.judge(f"gemm_{dtype}_tflops", lowest[dtype])
        if judged.status in (Status.WARN, Status.FAIL):
            slow = min(range(len(per_gpu)), key=per_gpu.__getitem__)
            findings.append((judged.status, f"GPU {slow} {dtype}: {judged.reason}"))
    if not measured:  # could not run (error) wins over not recorded (skipped)
        kind = MeasurementUnavailable if any(isinstance(e, MeasurementUnavailable) for e in missing) else NotApplicable
        raise kind("; ".join(map(str, missing)))
    judged_any = any(ctx.limits.band(f"gemm_{d}_tflops") for d in measured)
    status, reason = worst(findings)
    if not judged_any:
        status = Status.SKIPPED
    key = "fp16" if "fp16" in lowest else "bf16"
    band = ctx.limits.band(f"gemm_{key}_tflops")
    summary = ", ".join(f"{d} {v:.0f}" for d, v in lowest.items())
    return me.result(status, lowest[key], band.expected if band else None, "TFLOPS",
                     reason or f"slowest GPU: {summary} TFLOPS ({GEMM_N}x{GEMM_N})"
                     + ("" if judged_any else "; no baseline for this SKU: reported, not judged"), **measured)


def _allreduce_check(ctx: CheckContext, me: Check, metric: str, env: Mapping[str, str], what: str) -> CheckResult:
    ranks = ctx.gpus_present()
    band = ctx.limits.band(metric)
    size = int(band.size_bytes) if band and band.size_bytes else DEFAULT_ALLREDUCE_BYTES
    measured = _measurer(ctx).allreduce_busbw(size, ranks, ctx.repeats, env)
    busbw = measured.busbw  # judged as measured: 227.996 is under 228, whatever two decimals would show
    judged = ctx.limits.judge(metric, busbw)
    status, reason = judged.status, judged.reason
    if measured.wrong:  # a fast but wrong all_reduce is broken hardware or software, whatever its bandwidth
        status, reason = Status.FAIL, f"{measured.wrong} wrong element(s) in the result check ({busbw:g} GB/s)"
    elif judged.status is Status.SKIPPED:
        reason = f"{busbw:.1f} GB/s: no baseline for this SKU, reported, not judged"
    return me.result(status, busbw, judged.expected, "GB/s",
                     f"{what} at {format_size(size)}, best of {ctx.repeats} over {ranks} GPUs: {reason}",
                     size_bytes=size, ranks=ranks, env=dict(env), wrong=measured.wrong)


@check("nccl_allreduce_node", "NCCL_NODE_SLOW")
def nccl_allreduce_node(ctx: CheckContext, me: Check) -> CheckResult:
    """NCCL all_reduce bus bandwidth over this node's GPUs at the SKU's named size, best of N runs."""
    return _allreduce_check(ctx, me, "allreduce_busbw_gbps", {}, "all_reduce busbw")


@check("nccl_ib_loopback", "NCCL_IB_SLOW")
def nccl_ib_loopback(ctx: CheckContext, me: Check) -> CheckResult:
    """NCCL all_reduce with shared memory and P2P disabled, so traffic crosses the HCAs, best of N runs."""
    if not infiniband_ports(ctx):
        ctx.gpus_present()
        return me.result(Status.SKIPPED, reason="no InfiniBand HCA on this machine: nothing to loop back through")
    return _allreduce_check(ctx, me, "ib_loopback_busbw_gbps", IB_LOOPBACK_ENV, "IB-only all_reduce busbw")
