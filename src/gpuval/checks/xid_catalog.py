"""NVIDIA's Xid catalog as data (xid_catalog.yaml beside this module): each Xid's resolution buckets, immediate and
investigatory, mapped to gpuval's actions, each action with the verdict it carries. The catalog is read once and
checked whole: a bucket no mapping knows, an action no table names or an entry without a source is an error of
the packaged file, found by its test rather than by a node."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from gpuval.baselines.gpu_models import safe_load
from gpuval.results.model import Status

RULES = ("recovery", "solo", "severity")  # bucket rules resolved from the lines, not actions (xid_catalog.yaml)
_STATUS = {"pass": Status.PASS, "warn": Status.WARN, "fail": Status.FAIL}


@dataclass(frozen=True)
class Action:
    """What gpuval tells the operator to do, the verdict of an Xid whose immediate action it is, and its rank
    (a higher rank is the stronger action: the one a node's record and drain reason name); `in_slice`: what it
    means for an Xid the driver attributes to a MIG slice, where that differs (the slice's work, or every slice's)."""

    token: str
    say: str
    status: Status
    rank: int
    in_slice: str = ""

    def said(self, in_slice: bool) -> str:
        """What to do, for an Xid of a MIG slice (`in_slice`) or of the whole GPU."""
        return self.in_slice if in_slice and self.in_slice else self.say


@dataclass(frozen=True)
class XidEntry:
    """One Xid of the catalog: NVIDIA's mnemonic, description and buckets; gpuval's action where the catalog names
    no bucket; the Xids it cancels (a later one on the same GPU clears them); whether the driver follows it with an
    Xid 154 naming the recovery; a note from the catalog; and where each fact comes from."""

    code: int
    mnemonic: str
    description: str
    immediate: str
    investigatory: str
    xid154: bool = False
    cancels: tuple[int, ...] = ()
    action: str = ""
    note: str = ""
    source: tuple[str, ...] = ()


@dataclass(frozen=True)
class Catalog:
    """The catalog: entries by code, gpuval's actions by token, the bucket maps (immediate, investigatory) and
    Xid 154's recovery action codes mapped to actions."""

    entries: dict[int, XidEntry]
    actions: dict[str, Action]
    immediate: dict[str, str]
    investigatory: dict[str, str]
    recovery: dict[int, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def entry(self, code: int) -> XidEntry:
        """The entry of an Xid; one the catalog does not list asks to be looked up (a newer driver's code)."""
        return self.entries.get(code) or XidEntry(code, "", "not in the catalog gpuval carries", "", "",
                                                  action="investigate")

    def immediate_of(self, entry: XidEntry) -> str:
        """The immediate action token (or rule: recovery, solo, severity) of an Xid."""
        return entry.action or self.immediate[entry.immediate]

    def investigatory_of(self, entry: XidEntry) -> str:
        """The investigatory action token (or the solo rule) of an Xid; none where the catalog names none."""
        return self.investigatory.get(entry.investigatory, "none")

    def strongest(self, tokens: list[str]) -> str:
        """The strongest of several action tokens ("none" for none)."""
        return max(tokens, key=lambda t: self.actions[t].rank, default="none")


def _entry(code: Any, raw: dict[str, Any]) -> XidEntry:
    return XidEntry(int(code), str(raw.get("mnemonic", "")), str(raw.get("description", "")),
                    str(raw.get("immediate", "")), str(raw.get("investigatory", "")), bool(raw.get("xid154", False)),
                    tuple(int(c) for c in raw.get("cancels") or ()), str(raw.get("action", "")),
                    str(raw.get("note", "")), tuple(str(s) for s in raw.get("source") or ()))


def build(data: dict[str, Any]) -> Catalog:
    """A catalog from its YAML mapping; ValueError naming the first inconsistency (an unmapped bucket, an unknown
    action, an entry without a known source)."""
    actions = {token: Action(token, str(a["say"]), _STATUS[a["status"]], rank, str(a.get("in_slice", "")))
               for rank, (token, a) in enumerate((data.get("actions") or {}).items())}
    catalog = Catalog({int(c): _entry(c, e) for c, e in (data.get("xids") or {}).items()}, actions,
                      {str(k): str(v) for k, v in (data.get("immediate") or {}).items()},
                      {str(k): str(v) for k, v in (data.get("investigatory") or {}).items()},
                      {int(k): str(v) for k, v in (data.get("recovery") or {}).items()},
                      {str(k): str(v) for k, v in (data.get("sources") or {}).items()})
    known = set(actions) | set(RULES)
    for entry in catalog.entries.values():
        if not entry.action and entry.immediate not in catalog.immediate:
            raise ValueError(f"Xid {entry.code}: immediate bucket {entry.immediate!r} maps to no action")
        if entry.investigatory and entry.investigatory not in catalog.investigatory:
            raise ValueError(f"Xid {entry.code}: investigatory bucket {entry.investigatory!r} maps to no action")
        if not entry.source or set(entry.source) - set(catalog.sources):
            raise ValueError(f"Xid {entry.code}: source {list(entry.source)} is not one of {sorted(catalog.sources)}")
        if entry.action and entry.action not in known:
            raise ValueError(f"Xid {entry.code}: action {entry.action!r} is not one of {sorted(known)}")
    for token in [*catalog.immediate.values(), *catalog.investigatory.values(), *catalog.recovery.values()]:
        if token not in known:
            raise ValueError(f"bucket action {token!r} is not one of {sorted(known)}")
    return catalog


@lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The packaged catalog (read once per process)."""
    text = resources.files("gpuval.checks").joinpath("xid_catalog.yaml").read_text()
    return build(safe_load(text))
