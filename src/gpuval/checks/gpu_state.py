"""Checks of what NVML says about the GPUs: nothing here runs a workload (the kernel log's Xids: checks/xid.py)."""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import datetime, timezone

import pynvml

from gpuval.checks.base import Check, CheckContext, CheckResult, check, unreadable, worst
from gpuval.node.clock_counters import CounterMark, LastCounters
from gpuval.node.machine import ClockEventCounters, EccCounts, Gpu, GpuInventory
from gpuval.results.model import Status

# NVML clock event reasons (nvml.h): hardware slowdowns mean cooling or power delivery trouble; a software thermal
# slowdown is the driver protecting a hot GPU; the others (idle, application clocks, power cap, sync boost) are normal.
_HW_REASONS = {
    pynvml.nvmlClocksThrottleReasonHwSlowdown: "HW slowdown",
    pynvml.nvmlClocksThrottleReasonHwThermalSlowdown: "HW thermal slowdown",
    pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown: "HW power brake",
}
_SW_THERMAL = {pynvml.nvmlClocksThrottleReasonSwThermalSlowdown: "SW thermal slowdown"}
_USER_CLOCKS = pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting  # also locked clocks (UserDefinedClocks)
_IDLE = pynvml.nvmlClocksThrottleReasonGpuIdle


_unreadable = unreadable


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _lost(inv: GpuInventory) -> list[tuple[Status, str]]:
    """A FAIL per GPU the driver bound but NVML cannot open (fallen off the bus, Xid 79), named by PCI bus id."""
    return [(Status.FAIL, f"GPU {g.index} at PCI {g.pci_bus_id or '(bus id unknown)'}"
                          f"{' (' + g.name + ')' if g.name else ''} is lost: {g.error}") for g in inv.lost]


def _mig(inv: GpuInventory) -> tuple[list[tuple[Status, str]], list[int]]:
    """A WARN per GPU whose MIG mode changes at the next reset; the GPUs in MIG mode now."""
    pending = [(Status.WARN, f"GPU {g.index}: MIG mode {'on' if g.mig_pending else 'off'} is pending a GPU reset")
               for g in inv.gpus if g.mig_pending is not None and g.mig_pending != g.mig_current]
    return pending, [g.index for g in inv.gpus if g.mig_current]


@check("gpu_count", "GPU_MISSING")
def gpu_count(ctx: CheckContext, me: Check) -> CheckResult:
    """Number of GPUs the driver sees (and their model) against the SKU; a lost GPU fails, named by PCI bus id."""
    inv = ctx.inventory()
    count = len(inv.gpus)
    names = sorted({g.name for g in inv.gpus})
    details = {"models": names, "lost": [g.pci_bus_id for g in inv.lost], "not_ours": [g.index for g in inv.not_ours]}
    pending, mig = _mig(inv)
    if mig:
        details["mig"] = mig
    # another job's GPUs are on the node (NVML counts them) but never ours: the node is judged with them
    on_node = count + len(inv.not_ours)
    others = f" (+{len(inv.not_ours)} not this job's: NVML says no permission)" if inv.not_ours else ""
    judged = ctx.limits.judge("gpu_count", on_node + len(inv.lost))
    findings = _lost(inv) + pending
    if judged.status is Status.SKIPPED:
        if not on_node and not inv.lost:
            return me.result(Status.FAIL, 0, None, "GPUs", "the NVIDIA driver is loaded but sees no GPU", **details)
        status, reason = worst(findings) if findings else (Status.PASS, "")
        return me.result(status, count, None, "GPUs", reason or f"{count} GPUs{others}: {', '.join(names)} (no SKU "
                         "baseline for the count)", **details)
    if judged.status in (Status.WARN, Status.FAIL):
        findings.append((judged.status, f"{', '.join(names) or 'no GPU'}{others}: {judged.reason}"))
    model = ctx.baseline.gpu_model if ctx.baseline else None
    if model and any(model not in n for n in names):
        findings.append((Status.WARN, f"{count} GPUs, but {', '.join(names)} is not the {ctx.sku} model {model}: "
                                      "wrong SKU?"))
    status, reason = worst(findings)
    return me.result(status, count, judged.expected, "GPUs",
                     reason or f"{', '.join(names)}{others}: {judged.reason}"
                     + (f"; MIG mode on GPU {', '.join(map(str, mig))}" if mig else ""), **details)


@check("driver", "DRIVER_OLD")
def driver(ctx: CheckContext, me: Check) -> CheckResult:
    """NVIDIA driver and CUDA versions, against the oldest driver that supports the SKU's GPUs."""
    inv = ctx.inventory()
    minimum = ctx.baseline.driver_min if ctx.baseline else None
    shown = f"driver {inv.driver_version}, CUDA {inv.cuda_version or '?'}"
    if not minimum:
        return me.result(Status.PASS, inv.driver_version, None, "", f"{shown} (no minimum known for this SKU)")
    source = ctx.baseline.raw.get("driver_min_source", "") if ctx.baseline else ""
    if _version(inv.driver_version) < _version(minimum):
        return me.result(Status.FAIL, inv.driver_version, minimum, "",
                         f"{shown} is older than {minimum}, the first to support these GPUs ({source})")
    return me.result(Status.PASS, inv.driver_version, minimum, "", f"{shown} (at least {minimum})")


@check("ecc", "ECC_ERRORS")
def ecc(ctx: CheckContext, me: Check) -> CheckResult:
    """ECC mode and uncorrectable error counts (volatile: since driver load; aggregate: lifetime) per GPU."""
    inv = ctx.inventory()
    findings = _unreadable(inv, "ecc")
    volatile_total = 0
    for g in inv.gpus:
        if g.ecc_enabled is False:
            findings.append((Status.WARN, f"GPU {g.index}: ECC is off"))
        for metric, count in (("ecc_volatile_uncorrected", g.ecc.volatile_uncorrected),
                              ("ecc_aggregate_uncorrected", g.ecc.aggregate_uncorrected)):
            if count is None:
                continue
            if metric == "ecc_volatile_uncorrected":
                volatile_total += count
            judged = ctx.limits.judge(metric, count)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {g.index} {metric.replace('_', ' ')}: {judged.reason}"))
        findings += _ecc_split(ctx, g.index, g.ecc)
    if all(g.ecc.volatile_uncorrected is None for g in inv.gpus) and not findings:
        return me.result(Status.SKIPPED, reason="these GPUs report no ECC counters")
    status, reason = worst(findings)
    split = any(g.ecc.sram_volatile_corrected is not None for g in inv.gpus)
    return me.result(status, volatile_total, 0, "errors",
                     reason or f"ECC on, no uncorrectable error on {len(inv.gpus)} GPUs"
                     + (", SRAM and DRAM counts within limits" if split else ""),
                     sram_dram={g.index: _split_counts(g.ecc) for g in inv.gpus if g.ecc.sram_volatile_corrected
                                is not None})


# ECC counts judged apart by where the error happened (Ampere and later), AzNHC check_gpu_ecc's rules
_SPLIT = (("ecc_sram_uncorrected", "SRAM uncorrectable", "sram_{}_uncorrected"),
          ("ecc_sram_corrected", "SRAM correctable", "sram_{}_corrected"),
          ("ecc_dram_corrected", "DRAM correctable", "dram_{}_corrected"))


def _split_counts(e: EccCounts) -> dict[str, int | None]:
    return {f.format(kind): getattr(e, f.format(kind)) for _, _, f in _SPLIT for kind in ("volatile", "aggregate")}


def _ecc_split(ctx: CheckContext, index: int, e: EccCounts) -> list[tuple[Status, str]]:
    """SRAM uncorrectable (any), SRAM correctable and DRAM correctable (over the baseline's limits), volatile and
    aggregate alike; the SRAM error threshold NVML reports as crossed."""
    findings = []
    for metric, label, field_name in _SPLIT:
        for kind in ("volatile", "aggregate"):
            count = getattr(e, field_name.format(kind))
            if count is None:
                continue
            judged = ctx.limits.judge(metric, count)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {index} {kind} {label}: {judged.reason}"))
    if e.sram_threshold_exceeded:
        findings.append((Status.FAIL, f"GPU {index}: SRAM error threshold exceeded (nvidia-smi -q: SRAM Threshold "
                                      "Exceeded: Yes)"))
    return findings


def _spare_rows(g: Gpu) -> list[tuple[Status, str]]:
    """Memory no remap can fix (FAIL), banks with few or no spare rows left (WARN: the next failing row there
    cannot be remapped, nvidia-smi -q "Bank Remap Availability Histogram")."""
    found = []
    if g.unrepairable_memory:
        found.append((Status.FAIL, f"GPU {g.index}: unrepairable memory (nvidia-smi -q: Unrepairable Memory: Yes): "
                                   "the GPU needs replacing"))
    h = g.remap_histogram
    if h is not None and (h.none or h.low):
        found.append((Status.WARN, f"GPU {g.index}: spare rows running out: {h.none} bank(s) with none left, "
                                   f"{h.low} low (of {h.max + h.high + h.partial + h.low + h.none})"))
    return found


@check("row_remap", "ROW_REMAP")
def row_remap(ctx: CheckContext, me: Check) -> CheckResult:
    """Row remapping (A100 and later: pending, failed) or retired pages (V100), per GPU."""
    inv = ctx.inventory()
    findings = _unreadable(inv, "row_remap", "retired_pages")
    value = 0
    judged_any = bool(findings)
    for g in inv.gpus:
        if g.row_remap is not None:
            judged_any = True
            r = g.row_remap
            value += r.uncorrected_rows
            if r.failure:
                findings.append((Status.FAIL, f"GPU {g.index}: row remapping failed (the GPU needs replacing)"))
            if r.pending:
                findings.append((Status.WARN, f"GPU {g.index}: a row remap is pending; reset the GPU to apply it"))
            judged = ctx.limits.judge("row_remap_uncorrected", r.uncorrected_rows)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {g.index}: {judged.reason}"))
            findings += _spare_rows(g)
        elif g.retired_pages is not None:
            judged_any = True
            pages = g.retired_pages.get("single_bit", 0) + g.retired_pages.get("double_bit", 0)
            value += pages
            if g.retired_pages.get("pending"):
                findings.append((Status.WARN, f"GPU {g.index}: a page retirement is pending; reset the GPU"))
            judged = ctx.limits.judge("retired_pages", pages)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {g.index} retired pages: {judged.reason}"))
    if not judged_any:
        return me.result(Status.SKIPPED, reason="these GPUs report neither row remapping nor retired pages")
    status, reason = worst(findings)
    return me.result(status, value, 0, "rows", reason or f"no remap pending or failed on {len(inv.gpus)} GPUs")


@check("clock_throttle", "CLOCK_THROTTLE")
def clock_throttle(ctx: CheckContext, me: Check) -> CheckResult:
    """Clock event reasons: hardware slowdown (thermal, power brake) fails, software thermal slowdown warns."""
    inv = ctx.inventory()
    findings = _unreadable(inv, "throttle_reasons")
    for g in inv.gpus:
        if g.throttle_reasons is None:
            continue
        hw = [name for bit, name in _HW_REASONS.items() if g.throttle_reasons & bit]
        sw = [name for bit, name in _SW_THERMAL.items() if g.throttle_reasons & bit]
        if hw:
            findings.append((Status.FAIL, f"GPU {g.index}: {', '.join(hw)}"))
        if sw:
            findings.append((Status.WARN, f"GPU {g.index}: {', '.join(sw)}"))
    counted = [g for g in inv.gpus if g.clock_event_counters is not None]
    mark = CounterMark.beside(ctx.xid_mark) if ctx.xid_mark is not None else None  # this machine's, kept
    last = mark.read() if mark else {}
    for g in counted:
        findings += _held(g, last.get(g.uuid))
    if all(g.throttle_reasons is None for g in inv.gpus) and not findings and not counted:
        return me.result(Status.SKIPPED, reason="the driver reports no clock event reasons")
    kept = mark.write({g.uuid: g.clock_event_counters for g in counted if g.clock_event_counters},
                      datetime.now(timezone.utc)) if mark and counted else None
    status, reason = worst(findings)
    slowed = len({r.split(":")[0] for _, r in findings})
    return me.result(status, slowed, 0, "GPUs", (reason or f"no hardware or thermal slowdown on {len(inv.gpus)} GPUs")
                     + _power_capped(counted) + (f"; {kept}" if kept else ""),
                     counters={g.index: asdict(g.clock_event_counters) for g in counted})


# clock event reason counters (seconds since the driver loaded) that mean trouble when they grow: hardware
# slowdowns are cooling or power delivery faults (a WARN: they are past, the current reasons above judge now)
_COUNTED = (("hw_thermal_s", "hardware thermal slowdown"), ("hw_power_brake_s", "hardware power brake"),
            ("sw_thermal_s", "software thermal slowdown"))


def _held(g: Gpu, last: LastCounters | None) -> list[tuple[Status, str]]:
    """A WARN where a hardware or thermal slowdown held the clocks since the last run here (the counters only grow
    while the driver stays loaded; lower than last time: it reloaded, and the totals are since then)."""
    c = g.clock_event_counters
    assert c is not None
    keys = [key for key, _ in _COUNTED]
    since_last = last is not None and all((getattr(c, k) or 0) >= (getattr(last.counters, k) or 0) for k in keys)
    base = last.counters if since_last and last else ClockEventCounters()

    def grew(key: str) -> float:
        return (getattr(c, key) or 0.0) - (getattr(base, key) or 0.0)

    held = [f"{label} {grew(key):.1f} s" for key, label in _COUNTED if grew(key) > 0]
    when = f"since the last check here ({last.at:%Y-%m-%d %H:%M} UTC)" if since_last and last else \
        "since the driver loaded"
    return [(Status.WARN, f"GPU {g.index}: clocks held {when} by {', '.join(held)} (nvidia-smi -q: Clocks Event "
                          "Reasons Counters)")] if held else []


def _power_capped(counted: list[Gpu]) -> str:
    """The software power cap's time since the driver loaded: how a GPU runs at its power limit, reported."""
    capped = [(g.index, g.clock_event_counters.sw_power_cap_s) for g in counted
              if g.clock_event_counters and g.clock_event_counters.sw_power_cap_s]
    if not capped:
        return ""
    return "; software power cap since the driver loaded (normal at the power limit): " + ", ".join(
        f"GPU {i} {s:.1f} s" for i, s in capped)


def _capped(g: Gpu) -> str | None:
    """Why a GPU's clock is held below what it may run at, or None: application clocks set below the driver's
    default, or the clock held by a user setting (locked clocks) while the GPU is busy."""
    k = g.clocks
    below = [f"{label} {app} < default {default}" for label, app, default in
             (("SM", k.sm_application, k.sm_default), ("memory", k.mem_application, k.mem_default))
             if app is not None and default is not None and app < default]
    if below:
        return f"application clocks set below the default ({', '.join(below)} MHz)"
    reasons = g.throttle_reasons or 0
    if reasons & _USER_CLOCKS and not reasons & _IDLE and k.sm_current is not None and k.sm_max is not None \
            and k.sm_current < k.sm_max:
        return f"clock held at {k.sm_current} of {k.sm_max} MHz by an application or locked clock setting"
    return None


@check("app_clocks", "APP_CLOCKS_LOW")
def app_clocks(ctx: CheckContext, me: Check) -> CheckResult:
    """Application and locked clock settings: a WARN only where they hold the clock down. Default application
    clocks do not cap the clock on Pascal and later (the GPU boosts above them as power and temperature allow)."""
    inv = ctx.inventory()
    errors = _unreadable(inv, "clocks")
    if errors:
        return me.result(Status.ERROR, reason=f"could not run: {worst(errors)[1]}")
    known = [g for g in inv.gpus if g.clocks.sm_application is not None and g.clocks.sm_max is not None]
    if not known:
        return me.result(Status.SKIPPED, reason="the driver reports no application clocks (not supported on this GPU)")
    capped = [(g, why) for g in known if (why := _capped(g))]
    lowest = min(known, key=lambda g: g.clocks.sm_application)
    value, expected = lowest.clocks.sm_application, lowest.clocks.sm_default or lowest.clocks.sm_max
    if capped:
        g, why = capped[0]
        return me.result(Status.WARN, value, expected, "MHz", f"{len(capped)} GPU(s) capped, e.g. GPU {g.index}: "
                         f"{why}: run `gpuval tune clocks --reset` (or --lock for steady clocks) as root")
    shown = f"({lowest.clocks.sm_application}/{lowest.clocks.mem_application} MHz) on {len(known)} GPUs"
    if all(g.clocks.sm_application >= g.clocks.sm_max for g in known):
        reason = f"application clocks at maximum {shown}"
    elif all(g.clocks.sm_application == g.clocks.sm_default for g in known):
        reason = (f"application clocks at the driver default {shown}: on Pascal and later that does not cap the "
                  "clock, the GPU boosts above it under load")
    else:
        reason = f"application clocks not below the default {shown}"
    return me.result(Status.PASS, value, expected, "MHz", reason)


@check("persistence", "PERSISTENCE_OFF")
def persistence(ctx: CheckContext, me: Check) -> CheckResult:
    """Persistence mode: off means slow start-up of every job and clock settings that do not stick."""
    inv = ctx.inventory()
    errors = _unreadable(inv, "persistence_mode")
    if errors:
        return me.result(Status.ERROR, reason=f"could not run: {worst(errors)[1]}")
    off = [g.index for g in inv.gpus if g.persistence_mode is False]
    if all(g.persistence_mode is None for g in inv.gpus):
        return me.result(Status.SKIPPED, reason="the driver reports no persistence mode")
    if off:
        return me.result(Status.WARN, len(off), 0, "GPUs",
                         f"persistence mode off on GPU {', '.join(map(str, off))}: run `gpuval tune persistence on`")
    return me.result(Status.PASS, 0, 0, "GPUs", f"persistence mode on for {len(inv.gpus)} GPUs")


@check("pcie_link", "PCIE_DEGRADED")
def pcie_link(ctx: CheckContext, me: Check) -> CheckResult:
    """PCIe width (current vs maximum) and generation (maximum vs the SKU); idle GPUs may lower the current gen."""
    inv = ctx.inventory()
    findings = _unreadable(inv, "pcie")
    widths = []
    for g in inv.gpus:
        p = g.pcie
        if p.width_current is not None:
            widths.append(p.width_current)
        if p.width_current is not None and p.width_max is not None and p.width_current < p.width_max:
            findings.append((Status.FAIL, f"GPU {g.index}: link x{p.width_current} of x{p.width_max}"))
        for metric, value, label in (("pcie_gen", p.gen_max, "Gen"), ("pcie_width", p.width_max, "x")):
            if value is None:
                continue
            judged = ctx.limits.judge(metric, value)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {g.index}: maximum {label}{value}: {judged.reason}"))
    if not widths:
        if findings:
            return me.result(Status.ERROR, reason=f"could not run: {worst(findings)[1]}")
        return me.result(Status.SKIPPED, reason="the driver reports no PCIe link state")
    band = ctx.limits.band("pcie_width")
    status, reason = worst(findings)
    return me.result(status, min(widths), band.expected if band else max(g.pcie.width_max or 0 for g in inv.gpus),
                     "lanes", reason or f"every GPU at full width x{min(widths)} (current generation is not judged: "
                     "idle GPUs lower it to save power)")


@check("nvlink", "NVLINK_DOWN")
def nvlink(ctx: CheckContext, me: Check) -> CheckResult:
    """Active NVLinks per GPU against the SKU (a SKU with fewer links by design says so in its baseline)."""
    inv = ctx.inventory()
    band = ctx.limits.band("nvlinks_per_gpu")
    with_links = [g for g in inv.gpus if g.nvlink_active is not None]
    errors = _unreadable(inv, "nvlink_active")
    if errors and not with_links:  # an NVML error is not "no NVLink": never report it as links down
        return me.result(Status.ERROR, reason=f"could not run: {worst(errors)[1]}")
    if not with_links:
        if band and band.expected:
            return me.result(Status.FAIL, 0, band.expected, "links",
                             f"no NVLink reported, {ctx.sku} GPUs have {band.expected:g} each ({band.expected_source})")
        return me.result(Status.SKIPPED, reason="these GPUs have no NVLink")
    findings = list(errors)
    for g in with_links:
        active = sum(g.nvlink_active)
        down = [i for i, up in enumerate(g.nvlink_active) if not up]
        if band:
            judged = band.judge(active)
            if judged.status in (Status.WARN, Status.FAIL):
                findings.append((judged.status, f"GPU {g.index}: links {down} down, {judged.reason}"))
        elif down:
            findings.append((Status.FAIL, f"GPU {g.index}: links {down} of {len(g.nvlink_active)} down"))
    fewest = min(sum(g.nvlink_active) for g in with_links)
    status, reason = worst(findings)
    return me.result(status, fewest, band.expected if band else None, "links",
                     reason or f"{fewest} active NVLinks on each of {len(with_links)} GPUs")
