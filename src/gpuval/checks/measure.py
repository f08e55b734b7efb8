"""Checks that measure the GPUs: copy bandwidth, GEMM, NCCL all_reduce in the node and through the HCAs.

`TorchMeasurer` takes the measurements with torch on CUDA (all_reduce through gpuval's own collective bench,
`workloads.collective.run_local`); `RecordedMeasurer` gives a recording's published figures, so the verdicts are
tested without a GPU. Without GPUs these checks are skipped; with GPUs that torch cannot measure (torch missing, a
CPU-only build, a rank that crashed, nothing measured) they are errors, with the reason.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

from gpuval.checks.base import (
    AllreduceMeasurement, Check, CheckContext, CheckResult, MeasurementUnavailable, NotApplicable, check, worst,
)
from gpuval.checks.fabric import infiniband_ports
from gpuval.collectives.sizes import format_size
from gpuval.results.model import Status

# The IB-only NCCL run of reference.md: no shared memory, no NVLink/PCIe peer path, so every byte crosses an HCA.
IB_LOOPBACK_ENV = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_NET_GDR_LEVEL": "5"}
COPY_BYTES = 256 * 1024**2
GEMM_N = 8192
DEFAULT_ALLREDUCE_BYTES = 1024**3  # when the SKU's baseline names no size


class TorchMeasurer:
    """Measurements with torch on this machine's CUDA GPUs (all_reduce: NCCL; `backend="gloo"` runs it on CPUs)."""

    def __init__(self, run_id: str, results_path: str | None = None, backend: str = "nccl") -> None:
        self.run_id = run_id
        self.results_path = results_path
        self.backend = backend

    def _torch(self, cuda: bool = True):  # type: ignore[no-untyped-def]
        try:
            import torch
        except ImportError:
            raise MeasurementUnavailable("torch is not installed (pip install 'gpuval[torch]')") from None
        if cuda and not torch.cuda.is_available():
            raise MeasurementUnavailable(f"torch {torch.__version__} sees no CUDA GPU although the driver sees GPUs "
                                         "(a CPU-only torch build? install a CUDA build of torch)")
        return torch

    def copy_bandwidth(self, gpus: int) -> list[tuple[float, float]]:
        torch = self._torch()
        out = []
        for index in range(min(gpus, torch.cuda.device_count())):
            with torch.cuda.device(index):
                host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
                dev = torch.empty(COPY_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
                h2d = self._best_copy(torch, lambda: dev.copy_(host, non_blocking=True))
                d2h = self._best_copy(torch, lambda: host.copy_(dev, non_blocking=True))
                out.append((h2d, d2h))
                del host, dev
        return out

    @staticmethod
    def _best_copy(torch, copy, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
        best = 0.0
        copy()  # warm-up
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            copy()
            end.record()
            end.synchronize()
            best = max(best, COPY_BYTES / (start.elapsed_time(end) / 1000) / 1e9)
        return best

    def gemm_tflops(self, dtype: str, gpus: int) -> list[float]:
        torch = self._torch()
        kind = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        out = []
        for index in range(min(gpus, torch.cuda.device_count())):
            device = f"cuda:{index}"
            a = torch.randn(GEMM_N, GEMM_N, dtype=kind, device=device)
            b = torch.randn(GEMM_N, GEMM_N, dtype=kind, device=device)
            with torch.cuda.device(index):
                for _ in range(3):
                    torch.matmul(a, b)
                iters = 20
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    torch.matmul(a, b)
                end.record()
                end.synchronize()
            seconds = start.elapsed_time(end) / 1000
            out.append(2 * GEMM_N**3 * iters / seconds / 1e12)
            del a, b
        return out

    def allreduce_busbw(self, size_bytes: int, ranks: int, repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        self._torch(cuda=self.backend == "nccl")
        best, wrong = 0.0, 0
        for _ in range(max(repeats, 1)):
            table = self._run(size_bytes, ranks, iters=20, warmup=5, env=env)
            wrong += table.total_wrong()
            if table.rows:
                best = max(best, table.rows[-1].best_busbw())
        if best == 0.0 and not wrong:
            raise MeasurementUnavailable(f"all_reduce at {format_size(size_bytes)} measured nothing")
        return AllreduceMeasurement(best, wrong)

    def nccl_debug_log(self, ranks: int) -> str:
        self._torch()
        with tempfile.TemporaryDirectory(prefix="gpuval-nccl-") as tmp:
            env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": f"{tmp}/nccl.%h.%p.log"}
            self._run(1024**2, ranks, iters=2, warmup=1, env=env)
            return "\n".join(p.read_text(errors="replace") for p in sorted(Path(tmp).glob("nccl.*.log")))

    def _run(self, size_bytes: int, ranks: int, iters: int, warmup: int,  # type: ignore[no-untyped-def]
             env: Mapping[str, str]):
        from gpuval.collectives.driver import BenchConfig
        from gpuval.workloads.collective import BenchRequest, run_local

        cfg = BenchConfig(collective="all_reduce", min_bytes=size_bytes, max_bytes=size_bytes, iters=iters,
                          warmup=warmup, backend=self.backend)
        # record=False: the health record reports this figure; a `collective all_reduce` record of the same run
        # (with P2P/SHM disabled for the loopback) would pollute the bench plots of the report.
        req = BenchRequest(config=cfg, run_id=self.run_id, results_path=self.results_path, quiet=True, env=dict(env),
                           record=False)
        table, _ = run_local(req, ranks)
        return table


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
            judged = ctx.limits.judge(metric, round(value, 2))
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {index} {label}: {judged.reason}"))
    worst_h2d = min(h for h, _ in per_gpu)
    worst_d2h = min(d for _, d in per_gpu)
    band = ctx.limits.band("h2d_gbps")
    status, reason = worst(findings)
    if not findings and band is None:
        status, reason = Status.SKIPPED, "no baseline for this SKU: reported, not judged"
    return me.result(status, round(worst_h2d, 2), band.expected if band else None, "GB/s",
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
        judged = ctx.limits.judge(f"gemm_{dtype}_tflops", round(lowest[dtype], 1))
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
    return me.result(status, round(lowest[key], 1), band.expected if band else None, "TFLOPS",
                     reason or f"slowest GPU: {summary} TFLOPS ({GEMM_N}x{GEMM_N})"
                     + ("" if judged_any else "; no baseline for this SKU: reported, not judged"), **measured)


def _allreduce_check(ctx: CheckContext, me: Check, metric: str, env: Mapping[str, str], what: str) -> CheckResult:
    ranks = ctx.gpus_present()
    band = ctx.limits.band(metric)
    size = int(band.size_bytes) if band and band.size_bytes else DEFAULT_ALLREDUCE_BYTES
    measured = _measurer(ctx).allreduce_busbw(size, ranks, ctx.repeats, env)
    busbw = round(measured.busbw, 2)
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
