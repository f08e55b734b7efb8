"""Xid lines to findings, as NVIDIA's Xid catalog says to act on them (xid_catalog.py): one finding per GPU and Xid
however many lines the driver printed, its immediate action from the catalog, its investigatory action when it
recurred, and what later lines say about it.

- A burst is one event: lines of one Xid on one GPU less than `burst_s` apart (or without a time) are one burst;
  800,000 repeated lines are one finding with their count (NVSentinel#1120: ~800K Xid 95 lines, 29 distinct).
- Immediate versus investigatory: the immediate action recovers the GPU now; the investigatory one applies when
  the Xid recurred, in `recur` bursts or more, and never fails a node on its own (it warns).
- Xid 154 names the recovery the driver derived: it decides the action of the Xids the catalog links to it that
  came before it on that GPU; "to 0x0 (None)" clears them.
- Cancelling pairs: an Xid the catalog says cancels another (162 cancels 163) clears it when it came later on the
  same GPU.
- Solo (Xid 45): solo when no other Xid came from that GPU in the window and its lines name no earlier Xid as
  their cause ("caused by previous Xid 149", R590 and later).
- MIG: an Xid the driver attributes to a slice (GPU instance, compute instance) is that slice's finding; Xid 154,
  solo and the catalog's immediate action stay the GPU's, and the action says what it means for the slices (the
  catalog's `in_slice`: a contained error's restart is that slice's work, a reset is every slice's).

One pass over the lines, a dictionary of groups: linear in the number of lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from gpuval.checks.xid_catalog import Catalog, XidEntry
from gpuval.node.xid_lines import XidLine
from gpuval.results.model import Status

_LINE_CHARS = 300  # a finding keeps the last line it read, cut to this


@dataclass(frozen=True)
class Policy:
    """How lines become events and when an Xid recurred: lines of one Xid on one GPU less than `burst_s` seconds
    apart are one burst; `recur` bursts or more call for the investigatory action; `fatal` Xids fail (reset the GPU)
    whatever the catalog says (a site's baseline)."""

    burst_s: float
    recur: int
    fatal: frozenset[int] = frozenset()


@dataclass
class _Group:
    """The lines of one Xid on one GPU, accumulated in one pass."""

    first: XidLine
    last: XidLine
    count: int = 0
    bursts: int = 0
    last_index: int = -1
    fatal: bool = False  # a line printed severity Fatal (Xids 144-150)
    caused: bool = False  # a line named the earlier Xid that caused it

    def add(self, index: int, line: XidLine, burst_s: float) -> None:
        before, after = self.last.line.at, line.line.at
        if self.count == 0 or (before is not None and after is not None
                               and (after - before).total_seconds() >= burst_s):
            self.bursts += 1
        self.count += 1
        self.last, self.last_index = line, index
        self.fatal = self.fatal or line.severity == "Fatal"
        self.caused = self.caused or line.cause is not None


@dataclass(frozen=True)
class Finding:
    """One Xid on one GPU (or one MIG slice of it): how many lines in how many bursts, from when to when, the action
    gpuval asks for now (`action`), the one it asks for because it recurred (`investigate`, "none" else), the
    verdict, why (which bucket, which Xid 154 or cancelling Xid decided), the last line read, and where: the PCI
    address, the NVML index where known, the slice and its MIG device (`where`: the group's first line)."""

    entry: XidEntry
    count: int
    bursts: int
    first: datetime | None
    last: datetime | None
    action: str
    investigate: str
    status: Status
    why: str
    line: str
    where: XidLine

    @property
    def pci(self) -> str:
        """The GPU's PCI address as the driver printed it."""
        return self.where.pci

    def text(self, book: Catalog) -> str:
        """The finding in one line: what, where, how often, what to do and on whose word."""
        entry, at = self.entry, self.where
        name = f"Xid {entry.code}" + (f" ({entry.description})" if entry.description != "Unused" else "")
        seen = f"{self.count} line{'s' if self.count != 1 else ''}" + (f" in {self.bursts} bursts" if self.bursts > 1
                                                                       else "")
        out = f"{name} on {where_of(at)}, {seen}: {book.actions[self.action].said(at.gi is not None)} [{self.why}]"
        if self.investigate != "none":
            out += (f"; it recurred: {book.actions[self.investigate].said(at.gi is not None)} "
                    f"[catalog, investigatory: {entry.investigatory}]")
        return out + (f" ({entry.note})" if entry.note and self.status is not Status.PASS else "")

    def to_json(self) -> dict[str, Any]:
        """The record's view of the finding (details.xids)."""
        at = self.where
        return {"pci": at.pci, "gpu": at.gpu, "gpu_instance": at.gi, "compute_instance": at.ci,
                "mig_uuid": at.mig_uuid or None, "xid": self.entry.code, "mnemonic": self.entry.mnemonic,
                "count": self.count, "bursts": self.bursts, "first": self.first.isoformat() if self.first else None,
                "last": self.last.isoformat() if self.last else None, "action": self.action,
                "investigate": self.investigate, "status": self.status.value, "why": self.why, "line": self.line}


def where_of(line: XidLine) -> str:
    """Where an Xid happened, in words: the GPU's PCI address and NVML index where known, the MIG slice and its
    device ("PCI 0000:3b:00 (GPU 3) in MIG slice GI 5 CI 2 (MIG-...)")."""
    out = f"PCI {line.pci}"
    if line.gpu is not None:
        out += f" (GPU {line.gpu})"
    if line.gi is not None:
        out += f" in MIG slice GI {line.gi}" + (f" CI {line.ci}" if line.ci is not None else "")
        out += f" ({line.mig_uuid})" if line.mig_uuid else ""
    return out


_Key = tuple[str, int, int, int]  # GPU (PCI address), GPU instance, compute instance (-1: none), Xid


def _key(line: XidLine, code: int | None = None) -> _Key:
    """A group's key: the GPU, the slice, the Xid (`code` instead of the line's own, for a related Xid)."""
    gi, ci = -1 if line.gi is None else line.gi, -1 if line.ci is None else line.ci
    return line.pci, gi, ci, line.xid if code is None else code


@dataclass
class _Context:
    """What the groups say about each other: the latest Xid 154 per GPU, the Xids seen per GPU in any slice (for
    solo), and the groups each cancelling Xid clears (in the same slice)."""

    recovery: dict[str, _Group] = field(default_factory=dict)
    codes: dict[str, set[int]] = field(default_factory=dict)
    cancelled: dict[_Key, _Group] = field(default_factory=dict)


def _groups(lines: Iterable[XidLine], burst_s: float) -> dict[_Key, _Group]:
    groups: dict[_Key, _Group] = {}
    for index, line in enumerate(lines):
        group = groups.get(_key(line))
        if group is None:
            group = groups[_key(line)] = _Group(line, line)
        group.add(index, line, burst_s)
    return groups


def _context(groups: dict[_Key, _Group], book: Catalog) -> _Context:
    ctx = _Context()
    for (pci, _, _, code), group in groups.items():
        ctx.codes.setdefault(pci, set()).add(code)
        if code == 154:
            ctx.recovery[pci] = group
        for target in book.entry(code).cancels:
            cancelled = groups.get(_key(group.first, target))
            if cancelled is not None and group.last_index > cancelled.last_index:
                ctx.cancelled[_key(group.first, target)] = group
    return ctx


def _rule(token: str, group: _Group, ctx: _Context, book: Catalog) -> str:
    """An action token, the bucket rules resolved from the lines."""
    if token == "recovery":
        code = group.last.recovery_action
        return "investigate" if code is None else book.recovery.get(code, "investigate")
    if token == "solo":
        alone = ctx.codes[group.first.pci] <= {group.first.xid, 154} and not group.caused
        return "restart-fm" if alone else "none"
    if token == "severity":
        return "reset-gpu" if group.fatal else "none"
    return token


def _immediate(group: _Group, ctx: _Context, policy: Policy, book: Catalog) -> tuple[str, str]:
    """The immediate action and why: the catalog's bucket, a later Xid 154 for an Xid linked to it, a cancelling
    Xid, or the site's fatal list."""
    pci, entry = group.first.pci, book.entry(group.first.xid)
    if _key(group.first) in ctx.cancelled:
        by = ctx.cancelled[_key(group.first)]
        return "none", f"cancelled by the later Xid {by.first.xid}"
    recovery = ctx.recovery.get(pci)
    if entry.xid154 and recovery is not None and recovery.last_index > group.last_index:
        shown = recovery.last.recovery_text or "unreadable"
        return _rule("recovery", recovery, ctx, book), f"the later Xid 154 on this GPU: {shown}"
    action = _rule(book.immediate_of(entry), group, ctx, book)
    why = f"catalog: {entry.immediate}" if entry.immediate else f"no catalog bucket: gpuval's {entry.action}"
    if entry.code == 154:
        why = f"Xid 154: {group.last.recovery_text or 'no recovery action read'}"
    if entry.code in policy.fatal and book.actions[action].rank < book.actions["reset-gpu"].rank:
        return "reset-gpu", "the baseline's xid.fatal list"
    return action, why


def _finding(group: _Group, ctx: _Context, policy: Policy, book: Catalog) -> Finding:
    entry = book.entry(group.first.xid)
    action, why = _immediate(group, ctx, policy, book)
    investigate = "none"
    if group.bursts >= policy.recur and not why.startswith("cancelled"):
        investigate = _rule(book.investigatory_of(entry), group, ctx, book)
    status = book.actions[action].status
    if investigate != "none" and status is Status.PASS:
        status = Status.WARN  # an investigatory action warns: it never drains a node on its own
    return Finding(entry, group.count, group.bursts, group.first.line.at, group.last.line.at,
                   action, investigate, status, why, group.last.line.text.strip()[:_LINE_CHARS], group.first)


def triage(lines: Iterable[XidLine], policy: Policy, book: Catalog) -> list[Finding]:
    """The findings of these Xid lines (in log order), one per GPU (or MIG slice) and Xid, ordered by GPU, slice
    and code."""
    groups = _groups(lines, policy.burst_s)
    ctx = _context(groups, book)
    return [_finding(groups[key], ctx, policy, book) for key in sorted(groups)]


def action_of(findings: list[Finding], book: Catalog) -> str:
    """The action a node's record names: the strongest immediate action of its findings that did not pass, else
    the strongest investigatory one ("none" when nothing is to be done)."""
    acting = [f for f in findings if f.status is not Status.PASS]
    return (book.strongest([f.action for f in acting if f.action != "none"])
            if any(f.action != "none" for f in acting) else book.strongest([f.investigate for f in acting]))
