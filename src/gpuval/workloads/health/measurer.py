"""Measurements with torch on this machine's GPUs, for the health checks: pinned host<->device copies, GEMM, and
NCCL all_reduce through gpuval's own collective bench (run as local ranks). The checks (gpuval.checks.measure) judge
what this returns; they reach it only through the context's measurer, so checks never start work themselves."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

from gpuval.checks.base import AllreduceMeasurement, MeasurementUnavailable
from gpuval.checks.measure import COPY_BYTES, GEMM_N
from gpuval.collectives.sizes import format_size


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
        from gpuval.workloads.collective.run import BenchRequest, run_local

        cfg = BenchConfig(collective="all_reduce", min_bytes=size_bytes, max_bytes=size_bytes, iters=iters,
                          warmup=warmup, backend=self.backend)
        # record=False: the health record reports this figure; a `collective all_reduce` record of the same run
        # (with P2P/SHM disabled for the loopback) would pollute the bench plots of the report.
        req = BenchRequest(config=cfg, run_id=self.run_id, results_path=self.results_path, quiet=True, env=dict(env),
                           record=False)
        table, _ = run_local(req, ranks)
        return table
