"""The driver's error lines in a kernel log: GPU Xids (`NVRM: Xid`), NVSwitch SXids (`nvidia-nvswitchN: SXid`) and
Xid 154, the GPU recovery action the driver asks for (R550+).

Shapes, each from a published log (tests/data/kernel-log/SOURCE.md):
    NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008
    NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
    nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up
    nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub-engine instance 00
    NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 ...)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
On a MIG GPU the driver names the slice an Xid is attributable to inside the parenthesis, the GPU instance alone or
with the compute instance: "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u" (krcReportXid, kernel_rc.c of the open
kernel module); the last line above is NVIDIA's own example (A100 GPU Memory Error Management).
An SXid is reported as several lines; the one that says `Fatal` or `Non-fatal` is the event, the others (severity,
data) belong to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from gpuval.node.machine import LogLine

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?"
                  r"(?P<end>\)): (?P<code>\d+)")
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
    earlier Xid the line says caused it, if it says; the MIG slice it is attributed to (`gi` the GPU instance,
    `ci` the compute instance; None where the driver names none).

    `gpu` (the NVML index) and `mig_uuid` (the MIG device of that slice) are not in the line: the xid checks add
    them from the machine's inventory, where it knows the GPU at that address."""

    pci: str
    xid: int
    line: LogLine
    recovery_action: int | None = None
    recovery_text: str = ""
    severity: str = ""
    cause: int | None = None
    gi: int | None = None
    ci: int | None = None
    gpu: int | None = None
    mig_uuid: str = ""


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
        code, action, shown, severity = int(match.group("code")), None, "", ""
        if code == 154 and (rec := _RECOVERY.search(line.text)):
            action, shown = int(rec.group(2), 0), rec.group(3)
        if 144 <= code <= 150 and (nvl5 := _NVL5.match(line.text, match.start("end"))):
            severity = nvl5.group(1)
        cause = _CAUSE.search(line.text, match.end()) if code == 45 else None
        gi, ci = match.group("gi"), match.group("ci")
        found.append(XidLine(match.group("pci"), code, line, action, shown, severity,
                             int(cause.group(1)) if cause else None, int(gi) if gi else None,
                             int(ci) if ci else None))
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
