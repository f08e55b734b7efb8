"""Measurements with torch on this machine's GPUs, for the health checks: host<->device copies (measurer_copy:
a process per GPU on its own NUMA node), GEMM burst, device memory and GPU-to-GPU bandwidth (measurer_gpu), a
sustained GEMM load (workloads.burn.load), and NCCL all_reduce through gpuval's own collective bench (local
ranks). The checks (gpuval.checks.*) judge what this returns; they reach it only through the context's measurer.

Every figure names its GPU by NVML index and PCI bus id: each CUDA device here is matched to the NVML GPU it is by
UUID, else PCI bus id (node.gpus.cuda_ids, match_devices), whatever CUDA_VISIBLE_DEVICES and CUDA's enumeration
order say; CUDA_DEVICE_ORDER=PCI_BUS_ID is exported (unless set) for this process and every rank and worker.
A GPU asked for that CUDA cannot see here is left out (the checks say so); the NCCL ranks are the GPUs matched, one
per GPU, named to CUDA by UUID (CUDA_VISIBLE_DEVICES), so a Slurm subset or MIG never gets a rank without a GPU.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from gpuval.checks.base import MeasurementUnavailable
from gpuval.checks.figures import AllreduceMeasurement, CopyFigure, GpuRef, HbmFigure, LoadRun, PeerFigure
from gpuval.collectives.sizes import format_size
from gpuval.node.cuda_attrs import FABRIC_HINT, is_system_not_ready
from gpuval.node.gpus import NvmlGpu, cuda_ids, match_devices
from gpuval.node.nccl_topo import normalize_bus_id



def cuda_failure(torch: Any) -> str:
    """Why torch cannot use the GPUs NVML sees, in CUDA's own words: a CPU-only build, or CUDA's real error at
    start-up (torch.cuda.is_available() swallows it; torch.cuda.init() raises it)."""
    if getattr(torch.version, "cuda", None) is None:
        return f"torch {torch.__version__} is a CPU-only build: it cannot use the GPUs NVML sees (install a CUDA build)"
    try:
        torch.cuda.init()
    except Exception as exc:  # torch raises RuntimeError (or AssertionError) with CUDA's message
        text = " ".join(str(exc).split()) or type(exc).__name__
        hint = f" ({FABRIC_HINT})" if is_system_not_ready(text) else ""
        return f"NVML sees GPUs but CUDA cannot start: {text}{hint}"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU although NVML sees GPUs " \
           f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"


class TorchMeasurer:
    """Measurements with torch on this machine's CUDA GPUs (all_reduce: NCCL; `backend="gloo"` runs it on CPUs)."""

    def __init__(self, run_id: str, results_path: str | None = None, backend: str = "nccl") -> None:
        self.run_id = run_id
        self.results_path = results_path
        self.backend = backend
        self._loads: dict[tuple[Any, ...], LoadRun] = {}
        self._logs: dict[tuple[tuple[str, str], ...], str] = {}
        # before torch starts CUDA here: ordinals follow the PCI bus, as NVML's indices do (a user's choice stays)
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

    def _torch(self, cuda: bool = True):  # type: ignore[no-untyped-def]
        try:
            import torch
        except ImportError:
            raise MeasurementUnavailable("torch is not installed (pip install 'gpuval[torch]')") from None
        if cuda and (not torch.cuda.is_available() or torch.cuda.device_count() < 1):
            raise MeasurementUnavailable(cuda_failure(torch))
        return torch

    def devices(self, gpus: list[GpuRef]) -> list[tuple[int, GpuRef]]:
        """(CUDA ordinal here, GPU) for each GPU asked for that CUDA sees in this process, in NVML order."""
        torch = self._torch()
        ids = [cuda_ids(torch.cuda.get_device_properties(i)) for i in range(torch.cuda.device_count())]
        known = [NvmlGpu(g.index, normalize_bus_id(g.bus_id) if g.bus_id else "", g.uuid) for g in gpus]
        by_index = {g.index: g for g in gpus}
        found = [(cuda, by_index[m.index]) for cuda, m in enumerate(match_devices(ids, known)) if m is not None]
        return sorted(found, key=lambda pair: pair[1].index)

    def copy_bandwidth(self, gpus: list[GpuRef]) -> list[CopyFigure]:
        from gpuval.workloads.health.measurer_copy import copy_bandwidth

        return copy_bandwidth([g for _, g in self.devices(gpus)])

    def gemm_tflops(self, dtype: str, gpus: list[GpuRef]) -> list[tuple[GpuRef, float]]:
        from gpuval.workloads.health.measurer_gpu import gemm_burst

        return gemm_burst(self._torch(), self.devices(gpus), dtype)

    def gemm_load(self, dtype: str, gpus: list[GpuRef], seconds: float, alone: bool = True) -> LoadRun:
        """Each GPU alone for `seconds` (unless `alone` is False), then all at once; kept, so the checks that judge
        it share one run."""
        from gpuval.workloads.burn.load import gemm_load

        key = (dtype, tuple(g.index for g in gpus), seconds, alone)
        if key not in self._loads:
            torch, devices = self._torch(), self.devices(gpus)
            if not devices:
                raise MeasurementUnavailable("none of the GPUs asked for is visible to CUDA here")
            each = [gemm_load(torch, [d], dtype, seconds)[0] for d in devices] if alone else []
            self._loads[key] = LoadRun(dtype, seconds, each, gemm_load(torch, devices, dtype, seconds))
        return self._loads[key]

    def p2p_bandwidth(self, gpus: list[GpuRef]) -> list[PeerFigure]:
        from gpuval.workloads.health.measurer_gpu import cudart, peers

        torch = self._torch()
        return peers(torch, self.devices(gpus), cudart())

    def hbm_bandwidth(self, gpus: list[GpuRef]) -> list[HbmFigure]:
        from gpuval.workloads.health.measurer_gpu import hbm

        return hbm(self._torch(), self.devices(gpus))

    def _ranks(self, gpus: list[GpuRef]) -> tuple[list[GpuRef], dict[str, str]]:
        """The GPUs the ranks run on (one rank each) and the environment naming them to CUDA."""
        if self.backend != "nccl":
            return gpus, {}
        chosen = [g for _, g in self.devices(gpus)]
        if not chosen:
            raise MeasurementUnavailable("none of the GPUs asked for is visible to CUDA here")
        env = {"CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
        if all(g.uuid for g in chosen):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in chosen)
        return chosen, env

    def allreduce_busbw(self, size_bytes: int, gpus: list[GpuRef], repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        """Best of `repeats` runs; each run's figure is the mean of its out-of-place and in-place busbw at the size
        (nccl-tests' Avg bus bandwidth over one size, the figure AzNHC compares with its limits)."""
        self._torch(cuda=self.backend == "nccl")
        chosen, named = self._ranks(gpus)
        best, wrong, log = 0.0, 0, None
        for _ in range(max(repeats, 1)):
            table, text = self._run(size_bytes, len(chosen), iters=20, warmup=5, env={**env, **named})
            log = log or text
            wrong += table.total_wrong()
            if table.rows and table.rows[-1].sides():
                sides = table.rows[-1].sides()
                best = max(best, sum(s.bus_bw for s in sides) / len(sides))
        if best == 0.0 and not wrong:
            raise MeasurementUnavailable(f"all_reduce at {format_size(size_bytes)} measured nothing")
        if log is not None:
            self._logs[_key(env)] = log
        return AllreduceMeasurement(best, wrong, len(chosen), [g.label() for g in chosen], log)

    def nccl_debug_log(self, gpus: list[GpuRef], env: Mapping[str, str]) -> str:
        """NCCL_DEBUG=INFO of a run with `env`: the one an all_reduce with the same settings already produced, else
        a short one."""
        self._torch()
        debug = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH,ENV", **env}
        if _key(debug) not in self._logs:
            chosen, named = self._ranks(gpus)
            self._logs[_key(debug)] = self._run(1024**2, len(chosen), iters=2, warmup=1, env={**debug, **named})[1]
        return self._logs[_key(debug)]

    def _run(self, size_bytes: int, ranks: int, iters: int, warmup: int,  # type: ignore[no-untyped-def]
             env: Mapping[str, str]):
        """One all_reduce at one size over local ranks: its table, and its NCCL_DEBUG log when env asks for one."""
        from gpuval.collectives.driver import BenchConfig
        from gpuval.workloads.collective.run import BenchRequest, run_local

        cfg = BenchConfig(collective="all_reduce", min_bytes=size_bytes, max_bytes=size_bytes, iters=iters,
                          warmup=warmup, backend=self.backend)
        with tempfile.TemporaryDirectory(prefix="gpuval-nccl-") as tmp:
            full = dict(env)
            if "NCCL_DEBUG" in full:
                full["NCCL_DEBUG_FILE"] = f"{tmp}/nccl.%h.%p.log"
            # record=False: the health record reports this figure; a `collective all_reduce` record of the same
            # run (with P2P/SHM disabled for the loopback) would pollute the bench plots of the report.
            req = BenchRequest(config=cfg, run_id=self.run_id, results_path=self.results_path, quiet=True, env=full,
                               record=False)
            table, _ = run_local(req, ranks)
            logs = sorted(Path(tmp).glob("nccl.*.log"))
            text = "\n".join(p.read_text(errors="replace") for p in logs) if "NCCL_DEBUG" in full else None
        return table, text


def _key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Runs with the same NCCL settings give the same log (the debug variables aside)."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith("NCCL_DEBUG")))
