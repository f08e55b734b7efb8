"""Slurm nodes through scontrol and sinfo: one node's state and drain reason, drain and undrain; which nodes are
idle, which cannot take a job now, which leaf switch each sits under. Who may drain or resume what, and when, is
operate.node_state's policy: this module only reads and acts (`edit_node`: read, ask the policy, write).

Reading one node is `scontrol show node NAME` (one node, one RPC: cheap enough for a HealthCheckProgram on every
node, unlike `sinfo --json`, which returns every node of the cluster), its reason and its comment each read from its
own line (on one `-o` line, a person's comment holding "Reason=..." words would be read into the reason). Writing is
`scontrol update nodename=NAME state=drain reason=...` or `state=undrain` (RESUME where Slurm lacks UNDRAIN), with
the node's comment in the same update where the policy asks (gpuval's re-test window note: engines.nodes.WindowMark).
Changing a node's state needs Slurm operator rights: root (slurmd's HealthCheckProgram, prolog and epilog run as
root), SlurmUser, or an account with AdminLevel=Operator. slurmd runs HealthCheckProgram with SLURMD_NODENAME and
no PATH: give scontrol's full path (`scontrol=`) there: sinfo is taken from the same folder.

The census (`census`: what the drain brake counts) is one `sinfo -N -a -O` call for the whole cluster: each node's
compound state (idle+drain, the flags scontrol shows), the time of its reason (slurmctld's clock, to the second; Slurm
sets it whenever the reason is written), its comment and its reason; a few dozen bytes a node, where `scontrol show
nodes` sends a kilobyte. A reason and a comment are anyone's text, "|" and newlines included: every field ends with a
separator drawn at random for the call, which no text written before it holds.
"""

from __future__ import annotations

import re
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpuval.engines.nodes import (
    Census, HeldNode, NodeClient, NodeOwner, NodePolicy, SlurmEdit, SlurmNode, WindowMark,
)
from gpuval.engines.slurm.commands import output, run
from gpuval.engines.slurm.hostlist import compress, expand
from gpuval.errors import EngineError

TIMEOUT_S = 20  # each scontrol call on a node; HealthCheckProgram itself is killed by slurmd after 60 s
SETTLE_S = float(TIMEOUT_S)  # how long another gpuval's undrain, one scontrol call, may still be on its way
ATTEMPTS = 3  # reads and decisions of one edit, when the node changes under it
# scontrol prints the reason on a line of its own as "Reason=TEXT [USER@TIME]". The text is read whole, up to the
# line's last " [USER@TIME]" (else to its end), as sinfo's census reads it: a reason a person wrote on
# (" Hold=RMA-4711 ...", words that look like fields) is never cut back to gpuval's own shape.
_REASON = re.compile(r"^[ \t]*Reason=(?:(.*) \[[^\[\]@\s]*@[^\[\]\s]*\]|(.*))$", re.M)
_STATE = re.compile(r"\bState=(\S+)")
_COMMENT = re.compile(r"[ \t]*Comment=")  # a line of its own, up to the next line that starts a field
_FIELD_LINE = re.compile(r"[ \t]+[A-Za-z][A-Za-z0-9_]*=")
# Slurm node states (sinfo %T, any flag) in which a node takes no job now.
_UNAVAILABLE = ("down", "drain", "fail", "maint", "future", "unknown", "inval", "not_responding", "reboot")
_CENSUS_FIELDS = ("NodeList", "StateComplete", "Timestamp", "Comment", "Reason")  # each unpadded (width 0)


def parse_node(name: str, text: str) -> SlurmNode:
    """A SlurmNode from `scontrol show node NAME` (its lines: the reason and the comment each on one of its own)."""
    state = _STATE.search(text)
    reason = _REASON.search(text)
    return SlurmNode(name=name, state=state.group(1) if state else "UNKNOWN",
                     reason=next(g for g in reason.groups() if g is not None).strip() if reason else "",
                     comment=_comment(text))


def _comment(text: str) -> str:
    """The node's comment: its `Comment=` line and the lines after it up to the next field's ('' without one)."""
    lines = text.split("\n")
    at = next((i for i, line in enumerate(lines) if _COMMENT.match(line)), None)
    if at is None:
        return ""
    kept = [lines[at].split("=", 1)[1]]
    for line in lines[at + 1:]:
        if _FIELD_LINE.match(line):
            break
        kept.append(line)
    return "\n".join(kept).rstrip("\n")


def read_node(name: str, scontrol: str = "scontrol") -> SlurmNode:
    """The node's state, reason and comment now."""
    return parse_node(name, output([scontrol, "show", "node", name], timeout=TIMEOUT_S))


def _noted(comment: str | None) -> list[str]:
    """The update's comment field (one argv element; empty clears it), none where it is left as it is."""
    return [] if comment is None else [f"comment={comment}"]


def drain(name: str, reason: str, scontrol: str = "scontrol", comment: str | None = None) -> None:
    """Drain the node with `reason` (one argv element: spaces and all), and write its `comment` in the same update."""
    output([scontrol, "update", f"nodename={name}", "state=drain", f"reason={reason}", *_noted(comment)],
           timeout=TIMEOUT_S)


def undrain(name: str, scontrol: str = "scontrol", comment: str | None = None) -> None:
    """Lift the drain only (and write `comment` in the same update): UNDRAIN leaves a DOWN node down (slurmctld's
    call, not gpuval's), where RESUME would also bring it up. Slurm releases without UNDRAIN reject it as an invalid
    state: RESUME there."""
    try:
        output([scontrol, "update", f"nodename={name}", "state=undrain", *_noted(comment)], timeout=TIMEOUT_S)
    except EngineError as exc:
        if "Invalid node state" not in str(exc):
            raise
        output([scontrol, "update", f"nodename={name}", "state=resume", *_noted(comment)], timeout=TIMEOUT_S)


def edit_node(name: str, edit: Callable[[SlurmNode], SlurmEdit], scontrol: str = "scontrol",
              settle_s: float = SETTLE_S) -> SlurmNode:
    """Read the node, ask `edit` for the change given what it read, make it: the read-modify-write that
    kubernetes/nodes.edit_node is, compare-and-set as close as scontrol allows (it has no conditional update):

    - an undrain is made only if the node, read again right before it, is as it was read: a reason changed since
      (another gpuval added a code) is decided again, never lifted;
    - a drain is read back: one another writer undid at once is decided again;
    - a drain written over a drain is read once more `settle_s` after it: another gpuval that read the older drain
      may be lifting it right now, its undrain one scontrol call on its way (at most TIMEOUT_S); lifted meanwhile,
      the node is decided again on what it is then.

    A change that changes nothing (the same reason, the same comment) is not written; a comment alone is written as
    an undrain is. Returns the node as last read before the change."""
    for _ in range(ATTEMPTS):
        seen = read_node(name, scontrol)
        change = edit(seen)
        if change.action == "drain" and seen.drained and change.reason == seen.reason:
            change = SlurmEdit(comment=change.comment)  # drained so already: its comment, if anything
        comment = None if change.comment == seen.comment else change.comment
        if change.action == "keep" and comment is None:
            return seen
        if change.action != "drain":
            if read_node(name, scontrol) != seen:
                continue  # changed since it was read: decide again on what it is now
            if change.action == "undrain":
                undrain(name, scontrol, comment)
            else:
                output([scontrol, "update", f"nodename={name}", *_noted(comment)], timeout=TIMEOUT_S)
            return seen
        drain(name, change.reason, scontrol, comment)
        if _holds(name, change.reason, scontrol) and (not seen.drained or _holds(name, change.reason, scontrol,
                                                                                  settle_s)):
            return seen
    raise EngineError(f"scontrol: node {name} changed under each of {ATTEMPTS} tries to change it")


def _holds(name: str, reason: str, scontrol: str, after_s: float = 0.0) -> bool:
    """Whether the node is drained with `reason`, read `after_s` from now."""
    time.sleep(after_s)
    now = read_node(name, scontrol)
    return now.drained and now.reason == reason


def reopen(name: str, reason: str, window: str, scontrol: str = "scontrol") -> bool:
    """Lift the node's drain if it still has `reason` (as read by the caller) into the re-test window `window`, its
    note (engines.nodes.WindowMark: the window, now, the reason, the comment it replaces) written in the same update,
    so every census counts it as held throughout; whether it was lifted. Only inside a reservation (`reserve`): a
    node lifted outside one would take anyone's job before it is proven."""
    def lift(now: SlurmNode) -> SlurmEdit:
        if not (now.drained and now.reason == reason):
            return SlurmEdit()
        stale = now.window  # a stopped window's note, never closed: the comment before it is the node's own
        note = WindowMark(window, datetime.now(timezone.utc).replace(microsecond=0), reason,
                          stale.before if stale else now.comment)
        return SlurmEdit("undrain", comment=note.text())

    seen = edit_node(name, lift, scontrol)
    return seen.drained and seen.reason == reason


def redrain(name: str, reason: str, window: str, noted_only: bool = False, scontrol: str = "scontrol") -> bool:
    """Drain the node again with `reason` as the re-test window `window` closes, unless it is drained now (someone
    drained it meanwhile: theirs stays) or, `noted_only`, it carries no note of that window (it was not lifted by
    it, or was drained again since); in the same update the comment the note replaced is put back. Whether it
    drained it."""
    drained = []

    def close(now: SlurmNode) -> SlurmEdit:
        note = now.window
        before = note.before if note is not None and note.window == window else None
        drained[:] = [not now.drained and (before is not None or not noted_only)]
        return SlurmEdit("drain", reason, before) if drained[0] else SlurmEdit(comment=before)

    edit_node(name, close, scontrol)
    return drained[0]


def reserve(name: str, nodes: list[str], user: str) -> None:
    """A reservation `name` of `nodes` for `user`, from now, with no end (a process that dies leaves its nodes in
    it, out of everyone else's jobs, rather than in service). ignore_jobs: it is made whatever runs there now; a
    job in it waits for them. No maint flag: sinfo would show the nodes as maint, which the check reads as
    unavailable."""
    output(["scontrol", "create", "reservation", f"reservationname={name}", "starttime=now", "duration=UNLIMITED",
            "flags=ignore_jobs", f"users={user}", f"nodes={compress(nodes)}"], timeout=TIMEOUT_S)


def reserved(name: str) -> bool:
    """Whether the reservation `name` exists."""
    proc = run(["scontrol", "show", "reservation", name, "-o"], timeout=TIMEOUT_S)
    if proc.returncode and "not found" not in proc.stdout + proc.stderr:
        raise EngineError(f"scontrol show reservation: {(proc.stderr or proc.stdout).strip()[:200]}")
    return proc.returncode == 0 and f"ReservationName={name} " in proc.stdout


def cancel_reserved(name: str) -> None:
    """Cancel every job of the reservation `name` (a stopped re-test's, left queued or running in it)."""
    output(["scancel", f"--reservation={name}"], timeout=TIMEOUT_S)


def unreserve(name: str, wait_s: float = float(TIMEOUT_S)) -> None:
    """Delete the reservation `name`: its nodes take everyone's jobs again (those not drained). slurmctld refuses
    while a job of it has not left ("in use": a job cancelled a moment ago is still completing): asked again each
    second for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            output(["scontrol", "delete", f"reservationname={name}"], timeout=TIMEOUT_S)
            return
        except EngineError as exc:
            if "in use" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def reason_time(text: str) -> datetime | None:
    """sinfo's reason timestamp (slurmctld's local time, 2026-11-27T12:49:39) as an aware time; None for Unknown
    or anything else that is no time."""
    try:
        return datetime.fromisoformat(text.strip()).astimezone()
    except ValueError:
        return None


def census(owner: NodeOwner, sinfo: str = "sinfo") -> Census:
    """Every node of the cluster (each once, whatever its partitions, hidden ones included) and those `owner`
    holds, from one sinfo call; a node lifted into a re-test window (its note: `SlurmNode.window`) with the note's
    reason, time and window."""
    end = f"|{secrets.token_hex(8)}|"  # ends every field: no reason or comment written before this call holds it
    return census_of(output([sinfo, "-h", "-N", "-a", "-O", ",".join(f"{f}:0{end}" for f in _CENSUS_FIELDS)],
                            timeout=TIMEOUT_S), end, owner)


def census_of(listing: str, end: str, owner: NodeOwner) -> Census:
    """The census from sinfo's `listing`, each of its fields (`_CENSUS_FIELDS`) ended by `end`."""
    fields = listing.split(end)
    if len(fields) % len(_CENSUS_FIELDS) != 1:
        raise EngineError(f"sinfo: a node listing of {len(fields) - 1} fields, not {len(_CENSUS_FIELDS)} a node")
    seen: dict[str, HeldNode | None] = {}
    for at in range(0, len(fields) - 1, len(_CENSUS_FIELDS)):
        name, state, stamp, comment, reason = fields[at:at + len(_CENSUS_FIELDS)]
        name = name.strip()  # each node's line starts after the last one's newline
        if not name or name in seen:
            continue
        node = SlurmNode(name, state.strip(), "" if reason.strip() == "none" else reason.strip(),  # sinfo's words
                         "" if comment == "(null)" else comment)  # for none
        seen[name] = _held(node, stamp) if owner.slurm(node) else None
    return Census(len(seen), tuple(h for h in seen.values() if h is not None))


def _held(node: SlurmNode, stamp: str) -> HeldNode:
    """A node its owner holds: by its drain (its reason, its reason's time), or lifted into a re-test window (the
    window note's reason, time and window)."""
    note = node.window
    if node.drained or note is None:
        return HeldNode(node.name, node.reason, reason_time(stamp))
    return HeldNode(node.name, note.reason, note.since.astimezone(), note.window)  # local, as reason_time's


class SlurmNodes(NodeClient):
    """Slurm's node client: scontrol (`scontrol`: its full path where PATH is not set, as under slurmd); `settle_s`:
    see `edit_node`."""

    scheduler = "slurm"

    def __init__(self, scontrol: str = "scontrol", settle_s: float = SETTLE_S) -> None:
        self.scontrol = scontrol
        self.settle_s = settle_s

    def edit(self, node: str, policy: NodePolicy) -> None:
        edit_node(node, policy.slurm, self.scontrol, self.settle_s)

    def census(self, owner: NodeOwner) -> Census:
        return census(owner, str(Path(self.scontrol).with_name("sinfo")) if "/" in self.scontrol else "sinfo")


def idle_nodes(partition: str | None = None) -> list[str]:
    """The idle nodes (of `partition`), in sinfo's order."""
    where = ["-p", partition] if partition else []
    return list(dict.fromkeys(output(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N", *where]).split()))


def unavailable(nodes: list[str]) -> dict[str, str]:
    """node -> why it cannot take a job now (a Slurm state such as down or drained, or unknown to Slurm)."""
    listing = output(["sinfo", "-h", "-N", "-n", compress(nodes), "-o", "%N %T"])
    states: dict[str, str] = {}
    for line in listing.splitlines():
        name, _, state = line.strip().partition(" ")
        states[name] = state.strip().lower()
    why = {n: "not known to Slurm" for n in nodes if n not in states}
    wanted = set(nodes)
    for node, state in states.items():
        if node in wanted and any(word in state for word in _UNAVAILABLE):
            why[node] = f"Slurm state {state}"
    return why


def leaf_switches(nodes: list[str]) -> dict[str, str]:
    """node -> the leaf switch it sits under (`scontrol show topology`, TopologyPlugin=topology/tree, Level=0);
    {} where the cluster has no topology."""
    return topology_units(_topology(), nodes, "SwitchName", {"Level": "0"})


def blocks(nodes: list[str]) -> dict[str, str]:
    """node -> the block it is in (`scontrol show topology`, TopologyPlugin=topology/block, Slurm 23.11+: one block
    per NVLink domain, as NVIDIA/topograph and CoreWeave's SUNK write them); {} where the cluster has no blocks."""
    return topology_units(_topology(), nodes, "BlockName")


def _topology() -> str:
    proc = run(["scontrol", "show", "topology"])
    return proc.stdout if proc.returncode == 0 else ""


def topology_units(text: str, nodes: list[str], key: str, where: dict[str, str] | None = None) -> dict[str, str]:
    """node -> the unit `key` names on each line of `scontrol show topology` output that has `Nodes=` and every
    field of `where` (a switch: `SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]`; a block, as topology/block's
    `_print_topo_record` writes it: `BlockName=b1 BlockIndex=0 Nodes=n[01-18] BlockSize=18`, aggregated blocks being
    `AggregatedBlock=` lines, left out); only `nodes` are kept."""
    wanted = set(nodes)
    found: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if not fields.get(key) or not fields.get("Nodes") or any(fields.get(k) != v for k, v in (where or {}).items()):
            continue
        for node in expand(fields["Nodes"]):
            if node in wanted:
                found[node] = fields[key]
    return found
