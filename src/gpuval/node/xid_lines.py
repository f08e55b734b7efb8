"""The driver's error lines in a kernel log: GPU Xids (`NVRM: Xid`), NVSwitch SXids (`nvidia-nvswitchN: SXid`) and
Xid 154, the GPU recovery action the driver asks for (R550+).

Shapes, each from a published log (tests/data/kernel-log/SOURCE.md):
    NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008
    NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
    nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up
    nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
    NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 ...)
An SXid is reported as several lines; the one that says `Fatal` or `Non-fatal` is the event, the others (severity,
data) belong to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from gpuval.node.machine import LogLine

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
_SXID = re.compile(r"(nvidia-nvswitch\d*): SXid \(PCI:([0-9a-fA-F:.]+)\): (\d+), (Fatal|Non-fatal)", re.I)
# NVLink 5 Xids (144-150) print their unit and severity after the code: "149, NETIR_LINK_EVT Fatal XC0 ..."
_NVL5 = re.compile(r"\): \d+(?:, pid=[^,]*)?(?:, name=[^,]*)?, \S+ (Fatal|Nonfatal)\b")
# R590 and later name the Xid an Xid 45 follows: "45, pid=..., Ch 00000001 caused by previous Xid 149"
_CAUSE = re.compile(r"caused by previous Xid (\d+)")
_RECOVERY = re.compile(r"recovery action changed from \S+ \(([^)]*)\) to (0x[0-9a-fA-F]+|\d+) \(([^)]*)\)")

# NVML nvmlGpuRecoveryAction_t (nvml.h, R550+): what the driver asks be done before the GPU is used again
RECOVERY_ACTIONS = {0: "none", 1: "GPU reset", 2: "node reboot", 3: "drain peer-to-peer traffic",
                    4: "drain and reset", 5: "recover the IMEX domain", 6: "bus reset", 7: "system reboot"}


@dataclass(frozen=True)
class XidLine:
    """One GPU Xid: the GPU's PCI address as the driver prints it, the code, the line it came from; for Xid 154
    the recovery action it now asks for (0 none); for Xids 144-150 the severity printed (Fatal, Nonfatal); the
    earlier Xid the line says caused it, if it says."""

    pci: str
    xid: int
    line: LogLine
    recovery_action: int | None = None
    recovery_text: str = ""
    severity: str = ""
    cause: int | None = None


@dataclass(frozen=True)
class SxidLine:
    """One NVSwitch SXid event: the switch, its PCI address, the code, fatal or not, the line."""

    switch: str
    pci: str
    sxid: int
    fatal: bool
    line: LogLine


def xids(lines: Iterable[LogLine]) -> list[XidLine]:
    """The GPU Xid events of these lines, in order."""
    found = []
    for line in lines:
        match = _XID.search(line.text)
        if not match:
            continue
        code, action, shown, severity = int(match.group(2)), None, "", ""
        if code == 154 and (rec := _RECOVERY.search(line.text)):
            action, shown = int(rec.group(2), 0), rec.group(3)
        if 144 <= code <= 150 and (nvl5 := _NVL5.match(line.text, match.end(1))):
            severity = nvl5.group(1)
        cause = _CAUSE.search(line.text, match.end()) if code == 45 else None
        found.append(XidLine(match.group(1), code, line, action, shown, severity,
                             int(cause.group(1)) if cause else None))
    return found


def sxids(lines: Iterable[LogLine]) -> list[SxidLine]:
    """The NVSwitch SXid events (the Fatal / Non-fatal line of each) of these lines, in order."""
    found = []
    for line in lines:
        match = _SXID.search(line.text)
        if match:
            found.append(SxidLine(match.group(1), match.group(2), int(match.group(3)),
                                  match.group(4).lower() == "fatal", line))
    return found
