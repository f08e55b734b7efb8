"""Xid checks: the driver's GPU errors (Xid), the NVSwitch errors (SXid) and the recovery action the driver asks
for (Xid 154, NVML's GPU recovery action), in a window of the kernel log; and the Xids NVML reports while the suite
itself runs.

The window (`gpuval health --since`) starts by default at the last time this check passed on this machine, else at
boot: an Xid stays a failure until the node is rebooted or someone acknowledges it with --since, and one from a
past boot never is.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, worst
from gpuval.node.kernel_log import SINCE_BOOT
from gpuval.node.machine import HardwareUnavailable, LogWindow, NoGpuDriver, XidEvent
from gpuval.node.nccl_topo import normalize_bus_id
from gpuval.node.xid_lines import RECOVERY_ACTIONS, XidLine, sxids, xids
from gpuval.results.model import Status


def _when(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def window_start(ctx: CheckContext) -> tuple[datetime | None, str]:
    """Where the window starts and why: --since, else the last pass here (if after boot), else boot."""
    if ctx.since is not None and ctx.since != SINCE_BOOT:
        return ctx.since, f"since {_when(ctx.since)} (--since)"
    try:
        boot: datetime | None = ctx.machine.boot_time()
    except HardwareUnavailable:
        boot = None
    if ctx.since == SINCE_BOOT:
        return boot, f"since boot ({_when(boot)}, --since boot)" if boot else "since boot (--since boot)"
    last = ctx.xid_mark.read() if ctx.xid_mark else None
    if last is not None and (boot is None or last > boot):
        return last, f"since the last gpuval pass ({_when(last)})"
    if boot is not None:
        return boot, f"since boot ({_when(boot)})"
    return None, "over the whole log (no boot time known)"


def _codes(events: list[XidLine]) -> str:
    return f"{sorted({e.xid for e in events})} on PCI {', '.join(sorted({e.pci for e in events}))}"


def _xid_findings(ctx: CheckContext, events: list[XidLine]) -> list[tuple[Status, str]]:
    findings = []
    fatal_codes = set(ctx.limits.fatal_xids)
    recovery = [e for e in events if e.xid == 154 and e.recovery_action]  # 154 back to "None" (0) is no finding
    fatal = [e for e in events if e.xid in fatal_codes]
    other = [e for e in events if e.xid not in fatal_codes and e.xid != 154]
    for e in recovery:
        findings.append((Status.FAIL, f"Xid 154 on PCI {e.pci}: the driver asks for {e.recovery_text or 'a recovery'}"
                                      f": {e.line.text.strip()}"))
    if fatal:
        findings.append((Status.FAIL, f"{len(fatal)} fatal Xid event(s) {_codes(fatal)}: {fatal[-1].line.text.strip()}"))
    if other:
        findings.append((Status.WARN, f"{len(other)} Xid event(s) {_codes(other)}: {other[-1].line.text.strip()}"))
    return findings


def _sxid_findings(ctx: CheckContext, window: LogWindow) -> tuple[list[tuple[Status, str]], int, int]:
    harmless = {int(x) for x in ((ctx.limits.raw.get("sxid") or {}).get("harmless") or [])}
    events = sxids(window.lines)
    counted = [e for e in events if e.sxid not in harmless]
    findings = []
    for fatal, status in ((True, Status.FAIL), (False, Status.WARN)):
        chosen = [e for e in counted if e.fatal is fatal]
        if chosen:
            kind = "fatal" if fatal else "non-fatal"
            findings.append((status, f"{len(chosen)} {kind} NVSwitch SXid event(s) {sorted({e.sxid for e in chosen})} "
                                     f"on {', '.join(sorted({e.switch for e in chosen}))}: {chosen[-1].line.text.strip()}"))
    return findings, len(counted), len(events) - len(counted)


def _recovery_now(ctx: CheckContext) -> list[tuple[Status, str]]:
    """The recovery action NVML says each GPU waits for now (R550+), whatever the log window holds."""
    try:
        gpus = ctx.inventory().gpus
    except HardwareUnavailable:
        return []
    return [(Status.FAIL, f"GPU {g.index} ({g.pci_bus_id}): NVML's recovery action is "
                          f"{RECOVERY_ACTIONS.get(g.recovery_action, str(g.recovery_action))}")
            for g in gpus if g.recovery_action]


@check("xid", "XID_ERROR")
def xid(ctx: CheckContext, me: Check) -> CheckResult:
    """Xid, NVSwitch SXid and Xid 154 lines in the kernel log since --since (default: the last pass, else boot),
    and the recovery action NVML says a GPU waits for: fatal ones fail, others warn."""
    # Xids come from the NVIDIA kernel driver: without one there is nothing to look for. Asked of the driver, not
    # NVML, so a GPU NVML cannot open (Xid 79) still has its Xid shown.
    if ctx.machine.nvidia_driver() is None:
        raise NoGpuDriver(f"no NVIDIA driver: no NVIDIA kernel module loaded on {ctx.machine.description}")
    since, window_text = window_start(ctx)
    read_at = ctx.machine.now()
    window = ctx.machine.kernel_messages(since)
    events = xids(window.lines)
    sxid_findings, sxid_count, harmless = _sxid_findings(ctx, window)
    findings = _xid_findings(ctx, events) + sxid_findings + _recovery_now(ctx)
    undated = sum(1 for line in window.lines if line.at is None)
    where = f"in {window.source} {window_text}" + (f"; {undated} line(s) carry no time and were all counted"
                                                    if undated and since is not None else "")
    status, reason = worst(findings)
    details = {"xids": [{"pci": e.pci, "xid": e.xid, "at": e.line.at.isoformat() if e.line.at else None}
                        for e in events], "sxids": sxid_count, "harmless_sxids": harmless,
               "since": since.isoformat() if since else None, "source": window.source, "notes": window.notes}
    if status is Status.PASS and ctx.xid_mark is not None:
        problem = ctx.xid_mark.write(read_at)
        if problem:
            details["notes"] = [*window.notes, problem]
    return me.result(status, len(events) + sxid_count, 0, "events",
                     f"{reason} ({where})" if findings else f"no Xid or SXid event {where}", **details)


def _during_run(ctx: CheckContext, events: list[XidEvent]) -> list[tuple[Status, str]]:
    fatal_codes = set(ctx.limits.fatal_xids)
    seen = Counter((normalize_bus_id(e.pci_bus_id) if ":" in e.pci_bus_id else e.pci_bus_id, e.gpu, e.xid, e.source)
                   for e in events)
    findings = []
    for (pci, gpu, code, source), n in sorted(seen.items(), key=str):
        where = f"GPU {gpu} ({pci})" if gpu is not None else f"PCI {pci or '?'}"
        status = Status.FAIL if code in fatal_codes or code == 154 else Status.WARN
        findings.append((status, f"{where}: Xid {code} x{n} ({source})"))
    return findings


@check("xid_during_run", "XID_DURING_RUN")
def xid_during_run(ctx: CheckContext, me: Check) -> CheckResult:
    """Xid events the driver reported while this suite ran (NVML Xid events, new kernel log lines): the load the
    suite put on the GPUs provoked them. Fatal ones (and Xid 154) fail, others warn."""
    if ctx.xid_watch is None:
        if ctx.xid_watch_problem is not None:
            raise ctx.xid_watch_problem
        raise NotApplicable("no Xid watch ran: this check reports on the suite it ends (gpuval health)")
    events, notes = ctx.xid_watch.events(), ctx.xid_watch.notes()
    blind = any(n.startswith("no NVML Xid events:") for n in notes) and any(n.startswith("kernel log not read")
                                                                         for n in notes)
    if blind and not events:
        return me.result(Status.ERROR, reason=f"could not run: {'; '.join(notes)}")
    findings = _during_run(ctx, events)
    status, reason = worst(findings)
    shown = f" ({'; '.join(notes)})" if notes else ""
    return me.result(status, len(events), 0, "events",
                     (reason if findings else "no Xid event while the suite ran") + shown,
                     events=[{"xid": e.xid, "pci": e.pci_bus_id, "gpu": e.gpu, "source": e.source} for e in events],
                     notes=notes)
