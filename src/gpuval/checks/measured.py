"""What the measuring checks ask of a measurer and what comes back: per-GPU figures, each naming its GPU by NVML
index and PCI bus id (never by CUDA ordinal: CUDA_VISIBLE_DEVICES and FASTEST_FIRST reorder those), and the GPUs a
check measures (`targets`: MIG GPUs left out with the reason).

`RecordedMeasurer` answers from a recording's `measurements:` (published figures of the SKU), so every measuring
check's verdicts are tested without a GPU. A figure is one number for every GPU, or a list by NVML index. Under
the sustained load: `load_sm_mhz`, `load_power_w`, `load_temperature_c`, `load_memory_temperature_c`,
`load_reasons`, `load_mismatches`, and `load_appeared` (processes that started meanwhile: {gpu, pid, name, ...}).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from gpuval.checks.base import CheckContext, MeasurementUnavailable, NotApplicable
from gpuval.checks.figures import (  # noqa: F401  (the figure types: where the checks and measurers take them)
    AllreduceMeasurement, CopyFigure, GpuRef, HbmFigure, LoadFigure, LoadRun, Measurer, PeerFigure, gpu_row,
)
from gpuval.node.machine import GpuProcess


def targets(ctx: CheckContext) -> tuple[list[GpuRef], list[str]]:
    """The GPUs a measuring check measures, and why others are left out: a GPU in MIG mode is shared by its
    instances, which CUDA enumerates instead of it, so no whole-GPU figure can be taken. NotApplicable when no
    GPU is left (none at all, or every one in MIG mode)."""
    ctx.gpus_present()
    inv = ctx.inventory()
    mig = [g for g in inv.gpus if g.mig_current]
    chosen = [GpuRef.of(g) for g in inv.gpus if not g.mig_current]
    notes = [f"{', '.join(GpuRef.of(g).label() for g in mig)} in MIG mode: not measured (MIG instances share the "
             "GPU; turn MIG off to measure it)"] if mig else []
    if inv.lost:  # gpu_count fails for them; here they are only not measured
        notes.append(f"{', '.join(GpuRef.of(g).label() for g in inv.lost)} lost: not measured")
    if not chosen:
        raise NotApplicable(notes[0])
    return chosen, notes


T = TypeVar("T")


def measurer_of(ctx: CheckContext) -> Measurer:
    """The context's measurer; NotApplicable (skipped) when this run has none."""
    if ctx.measurer is None:
        raise NotApplicable("no GPU measurer in this run")
    return ctx.measurer


def measure_each(ctx: CheckContext, ask: Callable[[Measurer, list[GpuRef]], list[T]],
                 gpu_of: Callable[[T], GpuRef]) -> tuple[list[T], list[str]]:
    """Per-GPU figures of the GPUs a check measures (`ask(measurer, gpus)`), and notes naming the GPUs left out;
    MeasurementUnavailable (error) when no GPU could be measured."""
    chosen, notes = targets(ctx)
    figures = ask(measurer_of(ctx), chosen)
    notes += unmeasured(chosen, [gpu_of(f) for f in figures])
    if not figures:
        raise MeasurementUnavailable("no GPU measured" + "".join(f"; {n}" for n in notes))
    return figures, notes


def unmeasured(chosen: list[GpuRef], measured: list[GpuRef]) -> list[str]:
    """A note naming the GPUs asked for that the measurer could not reach (not visible to CUDA in this process)."""
    seen = {g.index for g in measured}
    missing = [g.label() for g in chosen if g.index not in seen]
    return [f"{', '.join(missing)}: not measured (not visible to CUDA in this process: CUDA_VISIBLE_DEVICES?)"] \
        if missing else []


def placed_summary(figures: list[CopyFigure]) -> str:
    """How the copies were placed: each from its GPU's own NUMA node, else the first placement that was not."""
    if all(f.placed == "recorded" for f in figures):
        return "recorded figures"
    odd = [f for f in figures if "not" in f.placed]
    return f"{odd[0].gpu.label()}: {odd[0].placed}" if odd else "each copy from its GPU's own NUMA node"


class RecordedMeasurer:
    """A recording's published figures (`measurements:` in its YAML): one number for every GPU, or a list by NVML
    index; a figure the recording lacks makes its check not apply (skipped)."""

    def __init__(self, measurements: Mapping[str, object], description: str) -> None:
        self.m = dict(measurements)
        self.description = description

    def _get(self, key: str, gpu: GpuRef | None = None) -> float:
        if key not in self.m:
            raise NotApplicable(f"{self.description} has no recorded {key}")
        value: Any = self.m[key]
        if isinstance(value, list):
            value = value[gpu.index] if gpu is not None else min(value)
        return float(value)

    def _maybe(self, key: str, gpu: GpuRef) -> float | None:
        return self._get(key, gpu) if key in self.m else None

    def copy_bandwidth(self, gpus: list[GpuRef]) -> list[CopyFigure]:
        return [CopyFigure(g, self._get("h2d_gbps", g), self._get("d2h_gbps", g), self._maybe("h2d_all_gbps", g),
                           self._maybe("d2h_all_gbps", g), "recorded") for g in gpus]

    def gemm_tflops(self, dtype: str, gpus: list[GpuRef]) -> list[tuple[GpuRef, float]]:
        return [(g, self._get(f"gemm_{dtype}_tflops", g)) for g in gpus]

    def gemm_load(self, dtype: str, gpus: list[GpuRef], seconds: float, alone: bool = True) -> LoadRun:
        key = f"gemm_sustained_{dtype}_tflops"
        self._get(key)

        def figure(g: GpuRef, suffix: str) -> LoadFigure:
            tflops = self._get(key + suffix, g) if key + suffix in self.m else self._get(key, g)
            reasons = self.m.get("load_reasons") or []
            seen = reasons[g.index] if reasons and isinstance(reasons[0], list) else reasons
            return LoadFigure(g, tflops, tflops, 1, self._maybe("load_sm_mhz", g), None,
                              self._maybe("load_power_w", g), whole(self._maybe("load_temperature_c", g)),
                              list(seen or []), int(self._maybe("load_mismatches", g) or 0), None, appeared(g),
                              whole(self._maybe("load_memory_temperature_c", g)))

        def whole(value: float | None) -> int | None:
            return None if value is None else int(value)

        def appeared(g: GpuRef) -> list[GpuProcess]:
            return [GpuProcess(**p) for p in self.m.get("load_appeared") or [] if p["gpu"] == g.index]

        return LoadRun(dtype, seconds, [figure(g, "") for g in gpus] if alone else [],
                       [figure(g, "_all") for g in gpus])

    def p2p_bandwidth(self, gpus: list[GpuRef]) -> list[PeerFigure]:
        if "p2p_read_gbps" not in self.m:
            raise NotApplicable(f"{self.description} has no recorded p2p_read_gbps")
        out = []
        for src in gpus:
            for dst in gpus:
                if src.index != dst.index:
                    out.append(PeerFigure(src, dst, self._pair("p2p_read_gbps", src, dst),
                                          self._pair("p2p_write_gbps", src, dst)))
        return out

    def _pair(self, key: str, src: GpuRef, dst: GpuRef) -> float | None:
        """A pair's figure: one number for every pair, or a mapping "READER<-PEER" (nvbandwidth's row and column,
        the reading GPU first) with an optional `default` for the pairs it does not name."""
        value: Any = self.m.get(key)
        if isinstance(value, dict):
            value = value.get(f"{dst.index}<-{src.index}", value.get("default"))
        return float(value) if value is not None else None

    def hbm_bandwidth(self, gpus: list[GpuRef]) -> list[HbmFigure]:
        if "hbm_memcpy_gbps" not in self.m and "hbm_triad_gbps" not in self.m:
            raise NotApplicable(f"{self.description} has no recorded hbm_memcpy_gbps or hbm_triad_gbps")
        return [HbmFigure(g, self._maybe("hbm_memcpy_gbps", g), self._maybe("hbm_triad_gbps", g))
                for g in gpus]

    def allreduce_busbw(self, size_bytes: int, gpus: list[GpuRef], repeats: int,
                        env: Mapping[str, str]) -> AllreduceMeasurement:
        key = "ib_loopback" if env.get("NCCL_P2P_DISABLE") == "1" else "allreduce"
        log = str(self.m["nccl_debug_log"]) if key == "ib_loopback" and "nccl_debug_log" in self.m else None
        return AllreduceMeasurement(self._get(f"{key}_busbw_gbps"), int(self.m.get(f"{key}_wrong", 0)),  # type: ignore[call-overload]
                                    ranks=len(gpus), gpus=[g.label() for g in gpus], log=log)

    def nccl_debug_log(self, gpus: list[GpuRef], env: Mapping[str, str]) -> str:
        if "nccl_debug_log" not in self.m:
            raise NotApplicable(f"{self.description} has no recorded NCCL_DEBUG=INFO log")
        return str(self.m["nccl_debug_log"])
