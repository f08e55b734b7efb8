"""Checks of GPUs under a sustained load (clocks judged under load, not at idle): a GEMM kept running for seconds
on each GPU alone and on all at once, with NVML sampling SM clock, power, temperature and clock event reasons every
100 ms meanwhile.

A 30 ms GEMM burst passes a GPU with bad cooling or a capped power delivery; seconds of load, all GPUs together
(one node's power and cooling shared), show them. `gemm_sustained` judges TFLOPS (each GPU against the SKU, and its
spread from the node's fastest GPU, as gpu-fryer does) and results that differ between runs of the same input;
`clocks_under_load` judges what NVML saw while the load ran: the clock event reasons and the SM clock, under load
and not the application-clock setting at idle, the power reached (DCGM's targeted_power: the GPU reaches its power
limit) and the hottest GPU and HBM temperature against the limits the driver reports. `gpuval burn` judges its
longer run with the same `load_findings`, `clock_findings` and `heat_power_findings`.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from gpuval.baselines import Baseline
from gpuval.checks.base import (
    Check, CheckContext, CheckResult, MeasurementUnavailable, check, why_not_judged, worst,
)
from gpuval.checks.measured import LoadFigure, LoadRun, gpu_row, measurer_of, targets, unmeasured
from gpuval.checks.peers import Figure, against_peers
from gpuval.results.model import Status

SUSTAINED_S = 10.0  # seconds of GEMM per GPU alone, and again with all GPUs at once, in the health suite
# NVML clock event reasons (node.sampler's names) that mean the hardware slowed the GPU under load: cooling or power
# delivery trouble, a FAIL; a software thermal slowdown is the driver protecting a hot GPU, a WARN.
HW_SLOWDOWNS = ("hardware slowdown", "hardware thermal slowdown", "hardware power brake")
SW_THERMAL = "software thermal slowdown"
HELD = "application/locked clocks setting"
PHASES = (("alone", "alone"), ("together", "with every GPU loaded"))
# The units of a burn's per-GPU figures that are not the record's own (TFLOPS): what Prometheus labels them with.
BURN_UNITS = {"windows": "", "sm_mhz_median": "MHz", "sm_mhz_min": "MHz", "power_w_max": "W",
              "temperature_c_max": "C", "memory_temperature_c_max": "C", "mismatches": ""}
POWER_CAP = "software power cap"
# Figures under load judged against the node's other GPUs of the model (gpuval.checks.peers): words and unit
TFLOPS_PEERS = (("tflops", "", "TFLOPS"),)
CLOCK_PEERS = (("sm_mhz_median", "SM clock median", "MHz"), ("power_pct", "peak power (% of its limit)", "%"))


def load_dtype(limits: Baseline) -> str:
    """bf16, or fp16 on a GPU model whose load runs fp16 (V100 has no bf16 tensor cores) or where the baseline
    judges only fp16."""
    model = limits.gpu.model if limits.gpu is not None else None
    if (model is not None and model.load_dtype == "fp16") or (
            limits.band("gemm_sustained_fp16_tflops") and not limits.band("gemm_sustained_bf16_tflops")):
        return "fp16"
    return "bf16"


def load_findings(limits: Baseline, figures: list[LoadFigure], dtype: str, phase: str) -> list[tuple[Status, str]]:
    """WARN/FAIL findings on sustained TFLOPS: each GPU against the SKU, each GPU's shortfall from the node's
    fastest, a GPU whose results differ between runs of the same input (FAIL), or from the other GPUs' (WARN)."""
    findings: list[tuple[Status, str]] = []
    if not figures:
        return findings
    best = max(f.tflops for f in figures)
    majority = Counter(f.checksum for f in figures if f.checksum).most_common(1)
    for f in figures:
        who = f"{f.gpu.label()} {phase}".rstrip()
        judged = limits.judge(f"gemm_sustained_{dtype}_tflops", f.tflops)
        if judged.status in (Status.WARN, Status.FAIL):
            findings.append((judged.status, f"{who}: {judged.reason}"))
        if len(figures) > 1 and best > 0:
            short = limits.judge("gemm_spread_pct", (best - f.tflops) / best * 100)
            if short.status in (Status.WARN, Status.FAIL):
                findings.append((short.status, f"{who}: {f.tflops:.0f} TFLOPS, {(best - f.tflops) / best * 100:.1f}% "
                                               f"under the node's fastest GPU ({short.reason})"))
        if f.mismatches:
            findings.append((Status.FAIL, f"{who}: {f.mismatches} of {f.windows} results differ from its first result "
                                          "of the same input (silent data corruption)"))
        if (majority and majority[0][1] * 2 > len(figures) and f.checksum and f.checksum != majority[0][0]
                and len(figures) > 2):
            findings.append((Status.WARN, f"{who}: its result differs from the other GPUs' for the same input "
                                          "(same model and library compute the same bits)"))
    return findings


def clock_findings(figures: list[LoadFigure], phase: str, sm_max: dict[int, int | None]) -> list[tuple[Status, str]]:
    """WARN/FAIL findings on what NVML sampled under load: a hardware slowdown, thermal slowdown or power brake
    fails; a software thermal slowdown warns; so does a clock held below its maximum by an application or locked
    clock setting. A software power cap alone is how a GPU runs a full GEMM at its power limit: not a finding."""
    findings: list[tuple[Status, str]] = []
    for f in figures:
        who = f"{f.gpu.label()} {phase}".rstrip()
        hw = [r for r in f.reasons_seen if r in HW_SLOWDOWNS]
        clock = f" (SM clock median {f.sm_mhz_median:.0f} MHz)" if f.sm_mhz_median is not None else ""
        if hw:
            findings.append((Status.FAIL, f"{who}: {', '.join(hw)} under load{clock}"))
        if SW_THERMAL in f.reasons_seen:
            peak = f", {f.temperature_c_max} C" if f.temperature_c_max is not None else ""
            findings.append((Status.WARN, f"{who}: {SW_THERMAL} under load{peak}"))
        top = sm_max.get(f.gpu.index)
        if HELD in f.reasons_seen and f.sm_mhz_median is not None and top and f.sm_mhz_median < top:
            findings.append((Status.WARN, f"{who}: clock held at {f.sm_mhz_median:.0f} of {top} MHz by an application "
                                          "or locked clock setting under load"))
    return findings


def peer_findings(ctx: CheckContext, figures: list[LoadFigure], phase: str,
                  what: tuple[tuple[str, str, str], ...]) -> tuple[list[tuple[Status, str]], str]:
    """WARN/FAIL findings of each GPU's figures under load against its peers' (TFLOPS, SM clock, peak power as a
    share of its own enforced limit: a GPU capped lower is power_limit's warn, not a peer's fail), and why the
    peers judged nothing ("" where they did)."""
    limits = {g.index: g.power.enforced_w for g in ctx.inventory().gpus}
    found: list[tuple[Status, str]] = []
    why = ""
    for field, words, unit in what:
        def value(f: LoadFigure) -> float | None:
            if field != "power_pct":
                return getattr(f, field)
            limit = limits.get(f.gpu.index)
            return f.power_w_max / limit * 100 if f.power_w_max is not None and limit else None
        more, why = against_peers(ctx, [Figure(f.gpu.label(), f.gpu.index, value(f)) for f in figures],
                                  f"{phase} {words}".strip(), unit)
        found += more
    return found, why


def _judged(ctx: CheckContext, metric: str, value: float, words: str) -> list[tuple[Status, str]]:
    judged = ctx.limits.judge(metric, value)
    return [(judged.status, f"{words}: {judged.reason}")] if judged.status in (Status.WARN, Status.FAIL) else []


def heat_power_findings(ctx: CheckContext, figures: list[LoadFigure], phase: str) -> list[tuple[Status, str]]:
    """WARN/FAIL findings on what the load drew and how hot it ran: the peak power against the GPU's enforced limit
    where the software power cap held its clocks (the driver says it is at its limit: DCGM's targeted_power asks
    the same), and the hottest GPU and HBM temperature against the driver's slowdown and HBM maximum."""
    gpus = {g.index: g for g in ctx.inventory().gpus}
    findings: list[tuple[Status, str]] = []
    for f in figures:
        g = gpus.get(f.gpu.index)
        if g is None:
            continue
        who = f"{f.gpu.label()} {phase}".rstrip()
        limit = g.power.enforced_w
        if f.power_w_max is not None and limit and POWER_CAP in f.reasons_seen:
            findings += _judged(ctx, "load_power_pct_of_limit", f.power_w_max / limit * 100,
                                f"{who}: peak power {f.power_w_max:.0f} W at its {limit:g} W limit, in %")
        t = g.temperature
        for label, peak, top, metric in (("GPU", f.temperature_c_max, t.gpu_slowdown_c, "load_gpu_temp_margin_c"),
                                         ("HBM", f.memory_temperature_c_max, t.memory_max_c, "load_hbm_temp_margin_c")):
            if peak is not None and top is not None:
                findings += _judged(ctx, metric, top - peak, f"{who}: {label} {peak} C under load, C under its "
                                                             f"limit {top} C")
    return findings


def heat_power_summary(ctx: CheckContext, figures: list[LoadFigure]) -> str:
    """The peak power (share of the limit) and the hottest GPU and HBM against their limits, in words."""
    gpus = {g.index: g for g in ctx.inventory().gpus}
    parts = []
    powered = [(f.power_w_max, gpus[f.gpu.index].power.enforced_w) for f in figures
               if f.power_w_max is not None and f.gpu.index in gpus and gpus[f.gpu.index].power.enforced_w]
    if powered:
        low = min(powered, key=lambda pw: pw[0] / pw[1])
        capped = any(POWER_CAP in f.reasons_seen for f in figures)
        parts.append(f"peak power {low[0]:.0f} W of a {low[1]:g} W limit at the lowest ({low[0] / low[1] * 100:.0f}%"
                     + ("" if capped else "; not judged: the software power cap never held the clocks") + ")")
    for label, key, top in (("GPU", "temperature_c_max", "gpu_slowdown_c"),
                            ("HBM", "memory_temperature_c_max", "memory_max_c")):
        peaks = [(getattr(f, key), getattr(gpus[f.gpu.index].temperature, top)) for f in figures
                 if getattr(f, key) is not None and f.gpu.index in gpus]
        if peaks:
            peak, limit = max(peaks, key=lambda p: p[0])
            parts.append(f"hottest {label} {peak} C" + (f" (limit {limit} C)" if limit else " (no limit reported)"))
    return ", ".join(parts)


def _run(ctx: CheckContext) -> tuple[LoadRun, list[str]]:
    """The sustained load of this context (the measurer runs it once and keeps it for both checks)."""
    chosen, notes = targets(ctx)
    run = measurer_of(ctx).gemm_load(load_dtype(ctx.limits), chosen, SUSTAINED_S)
    return run, notes + unmeasured(chosen, [f.gpu for f in run.together])


def _median_line(run: LoadRun) -> str:
    def low(figs: list[LoadFigure]) -> str:
        f = min(figs, key=lambda x: x.tflops)
        return f"{f.tflops:.0f} TFLOPS ({f.gpu.label()})"
    parts = [f"{word}: lowest {low(figs)}" for word, figs in (("alone", run.alone), ("all at once", run.together))
             if figs]
    return f"{run.dtype} GEMM {run.seconds:g} s, " + "; ".join(parts)


@check("gemm_sustained", "GEMM_SUSTAINED_SLOW")
def gemm_sustained(ctx: CheckContext, me: Check) -> CheckResult:
    """Sustained GEMM TFLOPS per GPU, alone and all at once: against the SKU, the spread from the node's fastest
    GPU, and the same input giving the same result throughout."""
    run, notes = _run(ctx)
    findings, why_no_peers = [], ""
    for phase, words in PHASES:
        findings += load_findings(ctx.limits, getattr(run, phase), run.dtype, words)
        peers, why_no_peers = peer_findings(ctx, getattr(run, phase), words, TFLOPS_PEERS)
        findings += peers
    status, reason = worst(findings)
    band = ctx.limits.band(f"gemm_sustained_{run.dtype}_tflops")
    spread = ("results judged (one GPU: no spread, not judged against peers)" if len(run.together) < 2 else
              f"spread and results judged; {why_no_peers}" if why_no_peers else
              "spread and results judged, each GPU against its peers")
    if band is None and not findings:
        status, reason = Status.PASS, f"TFLOPS not judged ({why_not_judged(ctx)}); {spread}"
    lowest = min(f.tflops for f in run.alone + run.together)
    summary = _median_line(run) + ("" if band is None and not findings else f"; {spread}")
    alone = {f.gpu.index: round(f.tflops, 1) for f in run.alone}
    return me.result(status, lowest, band.expected if band else None, "TFLOPS",
                     (f"{reason}: {summary}" if reason else summary) + "".join(f"; {n}" for n in notes),
                     dtype=run.dtype, seconds=run.seconds,
                     gpus=[gpu_row(f.gpu, alone=alone.get(f.gpu.index), together=round(f.tflops, 1))
                           for f in run.together],
                     mismatches={f.gpu.label(): f.mismatches for f in run.alone + run.together if f.mismatches})


@check("clocks_under_load", "CLOCKS_UNDER_LOAD")
def clocks_under_load(ctx: CheckContext, me: Check) -> CheckResult:
    """Clock event reasons, SM clocks, power and temperatures sampled under the sustained GEMM: hardware slowdown or
    power brake fails, software thermal slowdown or a clock held by a setting warns; the peak power against the
    enforced limit while the power cap holds the clocks, the hottest GPU and HBM against the driver's limits."""
    run, notes = _run(ctx)
    sm_max = {g.index: g.clocks.sm_max for g in ctx.inventory().gpus}
    findings, why_no_peers = [], ""
    for phase, words in PHASES:
        findings += clock_findings(getattr(run, phase), words, sm_max)
        findings += heat_power_findings(ctx, getattr(run, phase), words)
        peers, why_no_peers = peer_findings(ctx, getattr(run, phase), words, CLOCK_PEERS)
        findings += peers
    everything = run.alone + run.together
    sampled = [f for f in everything if f.sm_mhz_median is not None or f.reasons_seen or f.power_w_max is not None
               or f.temperature_c_max is not None]
    if not sampled and not findings:
        return me.result(Status.SKIPPED, reason="NVML gave no clock, event reason, power or temperature under load: "
                                                "not judged")
    status, reason = worst(findings)
    clocks = [f.sm_mhz_median for f in run.together if f.sm_mhz_median is not None]
    seen = sorted({r for f in everything for r in f.reasons_seen})
    heat = heat_power_summary(ctx, everything)
    summary = (f"under load: SM clock median {min(clocks):.0f}-{max(clocks):.0f} MHz with every GPU loaded"
               if clocks else "under load") + (f"; reasons seen: {', '.join(seen)}" if seen else "; no slowdown reason") \
        + (f"; {heat}" if heat else "") + f"; {why_no_peers or 'clocks and power judged against the peers'}"
    hottest = max((f.temperature_c_max for f in everything if f.temperature_c_max is not None), default=None)
    hbm = max((f.memory_temperature_c_max for f in everything if f.memory_temperature_c_max is not None), default=None)
    return me.result(status, min(clocks) if clocks else None, None, "MHz",
                     (f"{reason} ({summary})" if reason else summary) + "".join(f"; {n}" for n in notes),
                     reasons={f.gpu.label(): f.reasons_seen for f in run.together if f.reasons_seen},
                     temperature_c_max=hottest, memory_temperature_c_max=hbm,
                     power_w_max=max((f.power_w_max for f in everything if f.power_w_max is not None), default=None),
                     gpus=_load_rows(run), gpu_units=LOAD_UNITS)


LOAD_UNITS = {"power_w_alone": "W", "power_w_together": "W"}  # the rows' figures not in the record's MHz


def _load_rows(run: LoadRun) -> list[dict[str, object]]:
    """Each GPU's SM clock median and peak power under the load, alone and with every GPU loaded (what its peers are
    judged on, kept per GPU for a fleet's learning)."""
    alone = {f.gpu.index: f for f in run.alone}
    return [gpu_row(f.gpu, sm_mhz_alone=alone[f.gpu.index].sm_mhz_median if f.gpu.index in alone else None,
                    sm_mhz_together=f.sm_mhz_median,
                    power_w_alone=alone[f.gpu.index].power_w_max if f.gpu.index in alone else None,
                    power_w_together=f.power_w_max) for f in run.together]


def _burn(seconds: float) -> Callable[[CheckContext, Check], CheckResult]:
    def burn(ctx: CheckContext, me: Check) -> CheckResult:
        chosen, notes = targets(ctx)
        run = measurer_of(ctx).gemm_load(load_dtype(ctx.limits), chosen, seconds, alone=False)
        figures = run.together
        notes += unmeasured(chosen, [f.gpu for f in figures])
        if not figures:
            raise MeasurementUnavailable("no GPU measured" + "".join(f"; {n}" for n in notes))
        sm_max = {g.index: g.clocks.sm_max for g in ctx.inventory().gpus}
        findings = (load_findings(ctx.limits, figures, run.dtype, "") + clock_findings(figures, "", sm_max)
                    + heat_power_findings(ctx, figures, "")
                    + peer_findings(ctx, figures, "", TFLOPS_PEERS + CLOCK_PEERS)[0])
        status, reason = worst(findings)
        best, low = max(f.tflops for f in figures), min(figures, key=lambda f: f.tflops)
        spread = (f"{(best - low.tflops) / best * 100 if best else 0:.1f}% spread" if len(figures) > 1
                  else "spread not judged (one GPU)")
        summary = (f"{len(figures)} GPUs at once, {run.dtype} GEMM {seconds:g} s: {low.tflops:.0f}-{best:.0f} TFLOPS "
                   f"(lowest {low.gpu.label()}), {spread}, {sum(f.mismatches for f in figures)} wrong results")
        seen = sorted({r for f in figures for r in f.reasons_seen})
        summary += f", reasons seen: {', '.join(seen)}" if seen else ", no slowdown reason"
        heat = heat_power_summary(ctx, figures)
        summary += f", {heat}" if heat else ""
        band = ctx.limits.band(f"gemm_sustained_{run.dtype}_tflops")
        if band is None:
            summary += f"; TFLOPS not judged ({why_not_judged(ctx)})"
        return me.result(status, low.tflops, band.expected if band else None, "TFLOPS",
                         (f"{reason} ({summary})" if reason else summary)
                         + "".join(f"; {n}" for n in notes), dtype=run.dtype, seconds=seconds,
                         gpus=[gpu_row(f.gpu, tflops=round(f.tflops, 1), tflops_min=round(f.tflops_min, 1),
                                       windows=f.windows, sm_mhz_median=f.sm_mhz_median, sm_mhz_min=f.sm_mhz_min,
                                       power_w_max=f.power_w_max, temperature_c_max=f.temperature_c_max,
                                       memory_temperature_c_max=f.memory_temperature_c_max,
                                       reasons=f.reasons_seen, mismatches=f.mismatches, checksum=f.checksum)
                               for f in figures], gpu_units=BURN_UNITS)
    return burn


def burn_check(seconds: float) -> Check:
    """`gpuval burn`'s verdict as a check (not in the suite: it runs for as long as asked): every GPU loaded at
    once for `seconds`, judged by load_findings and clock_findings. Its `run(ctx)` turns could-not-run into
    ERROR and does-not-apply into SKIPPED, as every check's."""
    return Check("burn", "GPU_BURN_FAILED", True, "Every GPU under a GEMM load at once: TFLOPS, spread, results, "
                 "clocks and slowdown reasons", _burn(seconds))
