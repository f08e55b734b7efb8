"""Checks of counters and limits the hardware keeps: GPU power limits, PCIe replays and AER errors, NVLink error
counters, InfiniBand port error counters and link flaps. Each counter is judged by a band of the baseline (its
source beside it), on the figure as read; a counter counts since its last reset (driver load, boot), which each
reason says."""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta
from typing import Callable

from gpuval.checks.base import Check, CheckContext, CheckResult, check, unreadable, worst
from gpuval.checks.fabric import infiniband_ports
from gpuval.node.machine import Gpu, HardwareUnavailable, IbPort
from gpuval.results.model import Status

Finding = tuple[Status, str]


def _reporting(ctx: CheckContext, me: Check, field_name: str, reports: Callable[[Gpu], bool],
               judge: Callable[[CheckContext, Gpu], list[Finding]],
               none: str) -> tuple[list[Finding], list[Gpu]] | CheckResult:
    """The findings on the GPUs that report a reading (NVML's refusals among them) and those GPUs; when none
    reports, the result: error if NVML refused (could not read), else skipped with `none` (not reported here)."""
    inv = ctx.inventory()
    findings = unreadable(inv, field_name)
    read = [g for g in inv.gpus if reports(g)]
    if read:
        return findings + [f for g in read for f in judge(ctx, g)], read
    if findings:
        return me.result(Status.ERROR, reason=f"could not run: {worst(findings)[1]}")
    return me.result(Status.SKIPPED, reason=none)


def _judged(ctx: CheckContext, metric: str, value: float, label: str) -> list[Finding]:
    judged = ctx.limits.judge(metric, value)
    return [(judged.status, f"{label}: {judged.reason}")] if judged.status in (Status.WARN, Status.FAIL) else []


def _gpu_power(ctx: CheckContext, g: Gpu) -> list[Finding]:
    p = g.power
    assert p.enforced_w is not None
    if p.default_w is not None and p.enforced_w < p.default_w:
        return [(Status.WARN, f"GPU {g.index}: enforced power limit {p.enforced_w:g} W is under the board's default "
                              f"{p.default_w:g} W (set with nvidia-smi -pl, or capped from outside the VM): it runs "
                              "slower under load")]
    return _judged(ctx, "power_limit_w", p.enforced_w, f"GPU {g.index} enforced power limit")


@check("power_limit", "POWER_CAPPED")
def power_limit(ctx: CheckContext, me: Check) -> CheckResult:
    """Each GPU's enforced power limit, against the board's default and the SKU's board power: a capped GPU is
    slower under load (a setting, or a cap from outside: a warn)."""
    found = _reporting(ctx, me, "power", lambda g: g.power.enforced_w is not None, _gpu_power,
                       "the driver reports no power limits")
    if isinstance(found, CheckResult):
        return found
    findings, known = found
    lowest = min(known, key=lambda g: g.power.enforced_w or 0.0)
    band = ctx.limits.band("power_limit_w")
    status, reason = worst(findings)
    return me.result(status, lowest.power.enforced_w, band.expected if band else lowest.power.default_w, "W",
                     reason or f"every GPU at its default power limit ({lowest.power.enforced_w:g} W)"
                     + (f", the {ctx.sku or ctx.limits.title} board power ({band.expected_source})" if band else ""),
                     limits={g.index: [g.power.enforced_w, g.power.default_w] for g in known})


def _aer_total(counts: dict[str, int], total_key: str) -> int:
    """The file's TOTAL_ERR_* line, else the sum of its lines (older kernels name errors in long form)."""
    return counts.get(total_key, sum(v for k, v in counts.items() if not k.startswith("TOTAL_")))


def _pcie_findings(ctx: CheckContext, g: Gpu) -> list[Finding]:
    findings = []
    if g.pcie.replays is not None:
        findings += _judged(ctx, "pcie_replays", g.pcie.replays, f"GPU {g.index} PCIe replays since its last reset")
    for kind, total_key, metric in (("fatal", "TOTAL_ERR_FATAL", "pcie_aer_fatal"),
                                    ("nonfatal", "TOTAL_ERR_NONFATAL", "pcie_aer_nonfatal"),
                                    ("correctable", "TOTAL_ERR_COR", "pcie_aer_correctable")):
        if g.aer and kind in g.aer:
            findings += _judged(ctx, metric, _aer_total(g.aer[kind], total_key),
                                f"GPU {g.index} ({g.pci_bus_id}) AER {kind} errors since boot")
    return findings


@check("pcie_errors", "PCIE_ERRORS")
def pcie_errors(ctx: CheckContext, me: Check) -> CheckResult:
    """PCIe replays per GPU (NVML, since the GPU's last reset) and the AER error counters the kernel keeps for it
    (sysfs aer_dev_*, since boot): a fatal AER error fails, others warn over their limits."""
    found = _reporting(ctx, me, "pcie_replays", lambda g: g.pcie.replays is not None or bool(g.aer), _pcie_findings,
                       "these GPUs report no PCIe replay counter and the kernel keeps no AER counters for them (a "
                       "VM's virtual PCI bus often has none)")
    if isinstance(found, CheckResult):
        return found
    findings, read = found
    replays = [g.pcie.replays for g in read if g.pcie.replays is not None]
    aer = sum(1 for g in read if g.aer)
    status, reason = worst(findings)
    return me.result(status, max(replays) if replays else None, 0, "replays",
                     reason or f"PCIe replays {max(replays) if replays else 'not reported'} at most"
                     + (f", no AER error over its limit on {aer} GPUs" if aer else ", no AER counters for these GPUs"),
                     replays={g.index: g.pcie.replays for g in read}, aer={g.index: g.aer for g in read if g.aer})


_NVLINK = (("nvlink_replay_errors", "replay", ("replay",)), ("nvlink_recovery_errors", "recovery", ("recovery",)),
           ("nvlink_crc_errors", "CRC", ("crc_flit", "crc_data")))


def _nvlink_findings(ctx: CheckContext, g: Gpu) -> list[Finding]:
    findings = []
    for metric, label, fields in _NVLINK:
        per_link = {e.link: sum(getattr(e, f) or 0 for f in fields) for e in g.nvlink_errors or []}
        bad = [f"link {link}: {n}" for link, n in per_link.items() if n]
        found = _judged(ctx, metric, sum(per_link.values()), f"GPU {g.index} NVLink {label} errors")
        findings += [(s, f"{r} ({', '.join(bad)})") for s, r in found]
    return findings


@check("nvlink_errors", "NVLINK_ERRORS")
def nvlink_errors(ctx: CheckContext, me: Check) -> CheckResult:
    """NVLink error counters per GPU and link since the driver loaded (nvidia-smi nvlink -e): recovery errors
    (the link retrained) fail, replays and CRC errors (corrected by retransmission) warn."""
    found = _reporting(ctx, me, "nvlink_errors", lambda g: bool(g.nvlink_errors), _nvlink_findings,
                       "these GPUs report no NVLink error counters (no NVLink, or a driver that no longer has "
                       "nvmlDeviceGetNvLinkErrorCounter)")
    if isinstance(found, CheckResult):
        return found
    findings, read = found
    total = sum((getattr(e, f) or 0) for g in read for e in g.nvlink_errors or []
                for f in ("replay", "recovery", "crc_flit", "crc_data"))
    status, reason = worst(findings)
    return me.result(status, total, 0, "errors", reason or f"no NVLink error over its limit on {len(read)} GPUs "
                     f"({sum(len(g.nvlink_errors or []) for g in read)} links)")


# sysfs port counters judged, and the band of each (IBTA PortCounters; see _defaults.yaml for the sources)
_IB_COUNTERS = (("link_downed", "ib_link_downed"), ("link_error_recovery", "ib_link_error_recovery"),
                ("local_link_integrity_errors", "ib_link_integrity_errors"),
                ("excessive_buffer_overrun_errors", "ib_buffer_overrun_errors"))
_FLAP = re.compile(r"\b(ib[0-9A-Za-z_]+): lost carrier", re.I)


def _port_findings(ctx: CheckContext, p: IbPort, hours: float | None) -> list[Finding]:
    findings = []
    for counter, metric in _IB_COUNTERS:
        if counter in p.counters:
            findings += _judged(ctx, metric, p.counters[counter], f"{p.hca} port {p.port} {counter}")
    if "symbol_error" in p.counters and hours:
        findings += _judged(ctx, "ib_symbol_errors_per_hour", p.counters["symbol_error"] / hours,
                            f"{p.hca} port {p.port} symbol errors per hour since boot")
    return findings


def _flaps(ctx: CheckContext) -> tuple[list[Finding], dict[str, int], str]:
    """Carrier-lost lines of IB interfaces in the last 24 hours (AzNHC check_ib_link_flapping's window)."""
    since = ctx.machine.now() - timedelta(hours=24)
    try:
        window = ctx.machine.link_events(since)
    except HardwareUnavailable as exc:
        return [], {}, f"link flaps not read: {exc}"
    per_device = Counter(m.group(1) for line in window.lines if (m := _FLAP.search(line.text)))
    findings = [f for dev, n in sorted(per_device.items())
                for f in _judged(ctx, "ib_link_flaps", n, f"{dev}: {n} carrier losses in 24 h ({window.source})")]
    return findings, dict(per_device), f"link flaps read from {window.source}"


@check("ib_errors", "IB_ERRORS", needs_gpu=False)
def ib_errors(ctx: CheckContext, me: Check) -> CheckResult:
    """InfiniBand port error counters (sysfs: link downed, link recovery, integrity, buffer overrun, symbol
    errors per hour) and link flaps in the last 24 hours (syslog carrier losses, AzNHC's check)."""
    ports = infiniband_ports(ctx)
    if not ports:
        return me.result(Status.SKIPPED, reason="no InfiniBand HCA on this machine (/sys/class/infiniband)")
    try:
        hours: float | None = (ctx.machine.now() - ctx.machine.boot_time()).total_seconds() / 3600
    except HardwareUnavailable:
        hours = None
    findings = [f for p in ports for f in _port_findings(ctx, p, hours)]
    flap_findings, flaps, flap_note = _flaps(ctx)
    with_counters = [p for p in ports if p.counters]
    if not with_counters and not flaps and flap_note.startswith("link flaps not read"):
        return me.result(Status.SKIPPED, reason=f"no port counters and {flap_note}")
    status, reason = worst(findings + flap_findings)
    return me.result(status, sum(flaps.values()), 0, "flaps in 24 h",
                     reason or f"no error counter over its limit on {len(with_counters)} ports, "
                     f"{sum(flaps.values())} link flaps in 24 h ({flap_note})",
                     flaps=flaps, note=flap_note,
                     counters={f"{p.hca}/{p.port}": {k: p.counters[k] for k, _ in _IB_COUNTERS if k in p.counters}
                               for p in with_counters})
