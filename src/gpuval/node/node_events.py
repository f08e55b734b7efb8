"""A node's driver events since a moment (a job's start): GPU Xids, NVSwitch SXids, and among the Xids those that
report memory (ECC) errors, read from the kernel log through the node's Machine (gpuval.node.machine) and its Xid
lines (gpuval.node.xid_lines). It lists what happened; whether an event is fatal is the xid check's to say.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.node.xid_lines import sxids, xids

# The Xids NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) lists for GPU memory errors.
ECC_XIDS = {48: "double-bit ECC error", 63: "ECC page retirement or row remapping recorded",
            64: "ECC page retirement or row remapping failed", 92: "high single-bit ECC error rate",
            94: "contained ECC error", 95: "uncontained ECC error"}


class NodeEvent(BaseModel):
    """One event: Xid or SXid, its code, the device's PCI address, when (None: the log gave no time), the line."""

    kind: str  # "xid" or "sxid"
    code: int
    pci: str
    at: datetime | None
    text: str
    ecc: str = ""  # what an ECC Xid reports
    fatal: bool | None = None  # SXids say it themselves; Xids are judged by the xid check, not here


class NodeEvents(BaseModel):
    """A node's events since `since`, where they were read, and what could not be (`problem`: no log readable)."""

    since: datetime | None
    source: str = ""
    events: list[NodeEvent] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    problem: str = ""

    @property
    def ecc(self) -> list[NodeEvent]:
        """The memory (ECC) events among them."""
        return [e for e in self.events if e.ecc]


def events_since(machine: Machine, since: datetime | None) -> NodeEvents:
    """The node's Xid and SXid events since `since` (all of this boot when None); a kernel log that cannot be read is
    `problem`, never "no events"."""
    try:
        window = machine.kernel_messages(since)
    except HardwareUnavailable as exc:
        return NodeEvents(since=since, problem=f"could not read the kernel log: {exc}")
    found = [NodeEvent(kind="xid", code=e.xid, pci=e.pci, at=e.line.at, text=e.line.text.strip()[:1000],
                       ecc=ECC_XIDS.get(e.xid, "")) for e in xids(window.lines)]
    found += [NodeEvent(kind="sxid", code=e.sxid, pci=e.pci, at=e.line.at, text=e.line.text.strip()[:1000],
                        fatal=e.fatal) for e in sxids(window.lines)]
    undated = sum(1 for line in window.lines if line.at is None)
    notes = list(window.notes) + ([f"{undated} line(s) carry no time and were all counted"] if undated else [])
    return NodeEvents(since=since, source=window.source, events=found, notes=notes)
