"""A node's driver events since a moment (a job's start): GPU Xids, NVSwitch SXids, and among the Xids those that
report memory (ECC) errors, read from the kernel log through the node's Machine (gpuval.node.machine) and its Xid
lines (gpuval.node.xid_lines). It lists what happened; whether an event is fatal is the xid check's to say.

Bounded by construction, whatever the log holds: every event is counted per code and device, and only the last
PER_CODE events of each of at most MAX_CODES (code, device) pairs are kept whole. An Xid storm (thousands of Xid 13
in a minute) is one count and three lines, and the one ECC Xid among them, or the same code on another GPU, is still
there; the node's answer to a diagnosis (gpuval.workloads.diagnose.probe) stays a few dozen KB.
"""

from __future__ import annotations

from collections import Counter, deque
from datetime import datetime
from itertools import chain
from typing import Iterable

from pydantic import BaseModel, Field, model_validator

from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.node.xid_lines import sxids, xids

# The Xids NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) lists for GPU memory errors.
ECC_XIDS = {48: "double-bit ECC error", 63: "ECC page retirement or row remapping recorded",
            64: "ECC page retirement or row remapping failed", 92: "high single-bit ECC error rate",
            94: "contained ECC error", 95: "uncontained ECC error"}
PER_CODE = 3  # events of a code on a device kept whole: its last ones
MAX_CODES = 32  # (code, device) pairs counted apart; the rarer ones past it are summed in a note
TEXT_CHARS = 1000  # of an event's kernel line


class NodeEvent(BaseModel):
    """One event: Xid or SXid, its code, the device's PCI address, when (None: the log gave no time), the line."""

    kind: str  # "xid" or "sxid"
    code: int
    pci: str
    at: datetime | None
    text: str
    ecc: str = ""  # what an ECC Xid reports
    fatal: bool | None = None  # SXids say it themselves; Xids are judged by the xid check, not here


class EventCount(BaseModel):
    """How many events of one code (kind and code) happened on one device (PCI address), and what an ECC Xid of
    that code reports."""

    kind: str
    code: int
    pci: str
    count: int
    ecc: str = ""


class NodeEvents(BaseModel):
    """A node's events since `since`, where they were read, and what could not be (`problem`: no log readable):
    `total` events, `counts` per code and device (most frequent first), and `events` the last few of each, in the
    log's order (Xids, then SXids)."""

    since: datetime | None
    source: str = ""
    total: int = 0
    counts: list[EventCount] = Field(default_factory=list)
    events: list[NodeEvent] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    problem: str = ""

    @model_validator(mode="after")
    def _count_an_older_answer(self) -> NodeEvents:
        """An answer from a gpuval before the counts (a job's container may hold one) lists its events only:
        they are counted here, so none of them goes unsaid."""
        if self.events and not self.counts:
            found = counted(self.events)
            self.total, self.counts, self.events = found.total, found.counts, found.events
            self.notes += found.notes
        return self

    @property
    def ecc(self) -> list[NodeEvent]:
        """The memory (ECC) events kept among them."""
        return [e for e in self.events if e.ecc]

    @property
    def ecc_total(self) -> int:
        """How many memory (ECC) events happened."""
        return sum(c.count for c in self.counts if c.ecc)


def events_since(machine: Machine, since: datetime | None) -> NodeEvents:
    """The node's Xid and SXid events since `since` (all of this boot when None), counted per code and device with
    the last few of each kept (the module's docstring); a kernel log that cannot be read is `problem`, never "no
    events"."""
    try:
        window = machine.kernel_messages(since)
    except HardwareUnavailable as exc:
        return NodeEvents(since=since, problem=f"could not read the kernel log: {exc}")
    every_xid = (NodeEvent(kind="xid", code=e.xid, pci=e.pci, at=e.line.at, text=e.line.text.strip()[:TEXT_CHARS],
                           ecc=ECC_XIDS.get(e.xid, "")) for e in xids(window.lines))
    every_sxid = (NodeEvent(kind="sxid", code=e.sxid, pci=e.pci, at=e.line.at,
                            text=e.line.text.strip()[:TEXT_CHARS], fatal=e.fatal) for e in sxids(window.lines))
    undated = sum(1 for line in window.lines if line.at is None)
    notes = list(window.notes) + ([f"{undated} line(s) carry no time and were all counted"] if undated else [])
    return counted(chain(every_xid, every_sxid), since, window.source, notes)


def counted(events: Iterable[NodeEvent], since: datetime | None = None, source: str = "",
            notes: Iterable[str] = ()) -> NodeEvents:
    """Events read in one pass, as NodeEvents bounded by construction: each code on each device counted, the last
    PER_CODE of each kept in the order they came, the MAX_CODES most frequent codes counted apart and the rest
    summed in a note."""
    counts: Counter[tuple[str, int, str]] = Counter()
    last: dict[tuple[str, int, str], deque[tuple[int, NodeEvent]]] = {}
    for place, e in enumerate(events):
        counts[(e.kind, e.code, e.pci)] += 1
        last.setdefault((e.kind, e.code, e.pci), deque(maxlen=PER_CODE)).append((place, e))
    ranked = sorted(counts, key=lambda key: (-counts[key], key))
    shown, rest = ranked[:MAX_CODES], ranked[MAX_CODES:]
    found = NodeEvents(since=since, source=source, total=sum(counts.values()), notes=list(notes), counts=[
        EventCount(kind=key[0], code=key[1], pci=key[2], count=counts[key], ecc=last[key][0][1].ecc) for key in shown])
    found.events = [e for _, e in sorted((kept for key in shown for kept in last[key]), key=lambda kept: kept[0])]
    if rest:
        found.notes.append(f"{sum(counts[key] for key in rest)} event(s) of {len(rest)} more code(s) counted in the "
                           f"total only: {', '.join(f'{kind.upper()} {code}' for kind, code, _ in rest[:10])}"
                           + (", ..." if len(rest) > 10 else ""))
    return found
