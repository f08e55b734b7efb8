"""Xid checks: the driver's GPU errors (Xid), the NVSwitch errors (SXid) and the recovery action the driver asks
for (Xid 154, NVML's GPU recovery action), in a window of the kernel log; and the Xids NVML reports while the suite
itself runs. Each Xid is acted on as NVIDIA's Xid catalog says (checks/xid_triage.py): one finding per GPU and Xid,
its immediate action deciding the verdict, its investigatory action added when it recurred (a MIG slice's Xid is
that slice's finding, named by GPU, GPU and compute instance and MIG device); the strongest action is the record's
`action`, which a drain reason names.

The window (`gpuval health --since`) starts by default at the last time this check passed on this machine, else at
boot: an Xid stays a failure until the node is rebooted, the driver's Xid 154 says no recovery is needed, or
someone acknowledges it with --since; one from a past boot never is.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timezone

from gpuval.checks.base import Check, CheckContext, CheckResult, NotApplicable, check, worst
from gpuval.checks.xid_catalog import catalog
from gpuval.checks.xid_triage import Finding, Policy, action_of, triage
from gpuval.errors import UsageError
from gpuval.node.kernel_log import SINCE_BOOT
from gpuval.node.machine import Gpu, HardwareUnavailable, LogLine, LogWindow, NoGpuDriver, XidEvent
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


def _policy(ctx: CheckContext) -> Policy:
    """The baseline's xid section as a triage policy: burst gap and recurrence count (finite, refused otherwise)
    and the site's fatal list."""
    raw = ctx.limits.raw.get("xid") or {}
    burst, recur = raw.get("burst_s", 60), raw.get("recur", 3)
    if isinstance(burst, bool) or not isinstance(burst, (int, float)) or not math.isfinite(burst) or burst < 0:
        raise UsageError(f"baseline xid.burst_s {burst!r}: a finite number of seconds, 0 or more")
    if isinstance(recur, bool) or not isinstance(recur, int) or recur < 1:
        raise UsageError(f"baseline xid.recur {recur!r}: a whole number of bursts, 1 or more")
    return Policy(float(burst), recur, frozenset(ctx.limits.fatal_xids))


def _gpus_at(ctx: CheckContext) -> dict[str, Gpu]:
    """This machine's GPUs (lost ones too) by the PCI address an Xid line names them by (domain:bus:device); none
    where NVML cannot be read: the lines are then named by their address alone."""
    try:
        inventory = ctx.inventory()
    except HardwareUnavailable:
        return {}
    return {normalize_bus_id(g.pci_bus_id)[:10]: g for g in [*inventory.gpus, *inventory.lost] if g.pci_bus_id}


def _attributed(line: XidLine, gpus: dict[str, Gpu]) -> XidLine:
    """A finding's line with the GPU's NVML index and, for a MIG slice, its MIG device's UUID, where the inventory
    knows them (after triage: once per finding, not per line of a burst)."""
    g = gpus.get(normalize_bus_id(line.pci)[:10]) if ":" in line.pci else None
    if g is None:
        return line
    uuids = [d.uuid for d in g.mig_devices if line.gi is not None and d.gpu_instance == line.gi
             and (line.ci is None or d.compute_instance == line.ci)]
    return replace(line, gpu=g.index if line.gpu is None else line.gpu, mig_uuid=", ".join(uuids))


def _xid_findings(ctx: CheckContext, lines: list[XidLine]) -> tuple[list[tuple[Status, str]], list[Finding]]:
    """The catalog's findings of these Xid lines, named by GPU and slice, and those that warn or fail as (status,
    text)."""
    book = catalog()
    gpus = _gpus_at(ctx)
    found = [replace(f, where=_attributed(f.where, gpus)) for f in triage(lines, _policy(ctx), book)]
    return [(f.status, f.text(book)) for f in found if f.status is not Status.PASS], found


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


def _recovery_now(ctx: CheckContext) -> list[tuple[Status, str, str]]:
    """The recovery action NVML says each GPU waits for now (R550+), whatever the log window holds: (status, text,
    action)."""
    try:
        gpus = ctx.inventory().gpus
    except HardwareUnavailable:
        return []
    book = catalog()
    return [(Status.FAIL, f"GPU {g.index} ({g.pci_bus_id}): NVML's recovery action is "
                          f"{RECOVERY_ACTIONS.get(g.recovery_action, str(g.recovery_action))}",
             book.recovery.get(g.recovery_action, "investigate")) for g in gpus if g.recovery_action]


@check("xid", "XID_ERROR")
def xid(ctx: CheckContext, me: Check) -> CheckResult:
    """Xid, NVSwitch SXid and Xid 154 lines in the kernel log since --since (default: the last pass, else boot),
    judged by NVIDIA's Xid catalog (an Xid whose immediate action is a GPU reset or a reboot fails, one that asks
    for the application to be checked warns), and the recovery action NVML says a GPU waits for."""
    # Xids come from the NVIDIA kernel driver: without one there is nothing to look for. Asked of the driver, not
    # NVML, so a GPU NVML cannot open (Xid 79) still has its Xid shown.
    if ctx.machine.nvidia_driver() is None:
        raise NoGpuDriver(f"no NVIDIA driver: no NVIDIA kernel module loaded on {ctx.machine.description}")
    since, window_text = window_start(ctx)
    read_at = ctx.machine.now()
    window = ctx.machine.kernel_messages(since)
    events = xids(window.lines)
    xid_findings, found = _xid_findings(ctx, events)
    sxid_findings, sxid_count, harmless = _sxid_findings(ctx, window)
    now = _recovery_now(ctx)
    status, reason = worst(xid_findings + sxid_findings + [(s, text) for s, text, _ in now])
    undated = sum(1 for line in window.lines if line.at is None)
    where = f"in {window.source} {window_text}" + (f"; {undated} line(s) carry no time and were all counted"
                                                    if undated and since is not None else "")
    details = {"xids": [f.to_json() for f in found], "sxids": sxid_count, "harmless_sxids": harmless,
               "since": since.isoformat() if since else None, "source": window.source, "notes": window.notes}
    book = catalog()
    action = book.strongest([action_of(found, book), *(a for _, _, a in now)])
    if action != "none":
        details["action"] = action  # the suggested action: on the record, and in the drain reason (node_state)
    if status is Status.PASS and ctx.xid_mark is not None:
        problem = ctx.xid_mark.write(read_at)
        if problem:
            details["notes"] = [*window.notes, problem]
    quiet = (f"{len(events) + sxid_count} Xid or SXid line(s), none to act on by NVIDIA's Xid catalog {where}"
             if events or sxid_count else f"no Xid or SXid event {where}")
    return me.result(status, len(events) + sxid_count, 0, "events", f"{reason} ({where})" if reason else quiet,
                     **details)


def _as_lines(events: list[XidEvent]) -> list[XidLine]:
    """The events of a run as Xid lines: a kernel log line read as the log's own are (Xid 154's recovery action,
    the severity of 144-150, the MIG slice), an NVML event (a code, the GPU and slice, no text) as a line of its
    own."""
    lines = []
    for e in events:
        bus = normalize_bus_id(e.pci_bus_id) if ":" in e.pci_bus_id else (e.pci_bus_id or "?")
        read = xids([LogLine(e.text)]) if e.text else []
        lines.append(replace(read[0], pci=bus, gpu=e.gpu) if read else
                     XidLine(bus, e.xid, LogLine(e.text), gi=e.gpu_instance, ci=e.compute_instance, gpu=e.gpu))
    return lines


@check("xid_during_run", "XID_DURING_RUN")
def xid_during_run(ctx: CheckContext, me: Check) -> CheckResult:
    """Xid events the driver reported while this suite ran (NVML Xid events, new kernel log lines): the load the
    suite put on the GPUs provoked them, judged by NVIDIA's Xid catalog as the xid check judges its window."""
    if ctx.xid_watch is None:
        if ctx.xid_watch_problem is not None:
            raise ctx.xid_watch_problem
        raise NotApplicable("no Xid watch ran: this check reports on the suite it ends (gpuval health)")
    events, notes = ctx.xid_watch.events(), ctx.xid_watch.notes()
    blind = any(n.startswith("no NVML Xid events:") for n in notes) and any(n.startswith("kernel log not read")
                                                                         for n in notes)
    if blind and not events:
        return me.result(Status.ERROR, reason=f"could not run: {'; '.join(notes)}")
    findings, found = _xid_findings(ctx, _as_lines(events))
    status, reason = worst(findings)
    shown = f" ({'; '.join(notes)})" if notes else ""
    token = action_of(found, catalog())
    action = {"action": token} if token != "none" else {}
    return me.result(status, len(events), 0, "events",
                     (reason if findings else f"{len(events)} Xid event(s), none to act on by NVIDIA's Xid catalog"
                      if events else "no Xid event while the suite ran") + shown,
                     events=[{"xid": e.xid, "pci": e.pci_bus_id, "gpu": e.gpu, "gpu_instance": e.gpu_instance,
                              "compute_instance": e.compute_instance, "source": e.source} for e in events],
                     xids=[f.to_json() for f in found], notes=notes, **action)
