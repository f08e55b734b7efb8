"""A scheduler's node, whichever the scheduler: the one name of the node this runs on, the caps on a node list, the
two shapes of node state gpuval reads and writes (Slurm: a state with a drain reason; Kubernetes: taints, labels and
annotations) with the marks gpuval leaves, and `NodeClient`, the read-modify-write of one node that each scheduler's
package implements (slurm/nodes.py, kubernetes/nodes.py; each engine hands out its own: `Engine.node_client`), and
its census of the cluster (how many nodes, and those an owner holds out of service, each since when: what the drain
brake counts). Which scheduler this node is one of is the registry's (`gpuval.engines.detect_scheduler`).

What to write for which verdict is operate.node_state's policy: it hands a `NodePolicy` to the client, and the client
asks it for the edit of its own shape (double dispatch), so the policy names no scheduler module and no scheduler
branches on a name. Whose drain a node carries is the policy's too: the census asks a `NodeOwner` about each node.
This module imports nothing of a scheduler.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal, Mapping, Protocol

from gpuval.errors import UsageError
from gpuval.node.host import NODE_NAME_VARIABLE, hostname, scheduler_node

MAX_NODES = 100_000  # nodes in one list: above the largest clusters; a typo such as n[1-999999999] is refused
MAX_TEXT = 1_000_000  # characters of one node list


def this_node(env: Mapping[str, str] | None = None) -> str:
    """The scheduler's name of the node this runs on: GPUVAL_NODE_NAME (a pod's, from the downward API), else
    SLURMD_NODENAME (slurmd sets it for HealthCheckProgram, prolog, epilog and every task), else the short host
    name. Verdicts, drains, kept results and exclude lists use this name."""
    return scheduler_node(os.environ if env is None else env) or hostname()


def node_name_env() -> dict[str, Any]:
    """The container env entry that gives a pod NODE_NAME_VARIABLE from the downward API (a new dict each time: a
    shared one would dump as a YAML anchor)."""
    return {"name": NODE_NAME_VARIABLE, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def node_list(text: str) -> list[str]:
    """The names of a comma-separated node list, duplicates removed, order kept; at most MAX_NODES names in
    MAX_TEXT characters, counted before the text is split."""
    if len(text) > MAX_TEXT or text.count(",") >= MAX_NODES:
        raise UsageError(f"node list: at most {MAX_NODES} names in {MAX_TEXT} characters")
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError(f"node list {text[:40]!r}: no node named")
    return names


# ---- Slurm's shape: a state with a reason -----------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmNode:
    """A node as scontrol shows it: the state with its flags (IDLE+DRAIN, DOWN+NOT_RESPONDING), the reason, and the
    comment (where gpuval notes a node it lifted into a re-test window: `window`)."""

    name: str
    state: str
    reason: str
    comment: str = ""

    @property
    def window(self) -> "WindowMark | None":
        """gpuval's note that it lifted this node into a re-test window, where its comment is one (`window_mark`)."""
        return window_mark(self.comment)

    @property
    def flags(self) -> set[str]:
        return set(self.state.upper().rstrip("*").split("+"))

    @property
    def drained(self) -> bool:
        """Draining or drained: the DRAIN flag, whatever the base state."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return "DOWN" in self.flags


@dataclass(frozen=True)
class SlurmEdit:
    """One change to a Slurm node: drain it with `reason`, lift its drain, or leave it (keep); and its comment
    written in the same update (None: left as it is)."""

    action: Literal["drain", "undrain", "keep"] = "keep"
    reason: str = ""
    comment: str | None = None


# gpuval's re-test window (`gpuval fleet retest`): Slurm 22.05 starts no job on a drained node, a reservation's jobs
# included, so a held node's drain is lifted into a reservation while its re-test runs. Its drain reason would go
# with the drain, and with it every census of what gpuval holds: so the same update writes gpuval's note in the
# node's comment (Slurm 20.11+), and the update that drains it again puts back the comment it had. The note is
# "WINDOW SINCE REASON", then " || " and the comment it replaced, if any: gpuval's reason has no "|".
WINDOW_PREFIX = "gpuval-retest-"  # a window's name (its reservation's): the prefix and the re-test's run id
_WINDOW = re.compile(f"({re.escape(WINDOW_PREFIX)}" r"[A-Za-z0-9-]{1,64}) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) "
                     r"([^|\n]+?)(?: \|\| (.*))?", re.S)
_WINDOW_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class WindowMark:
    """gpuval's note on a Slurm node it lifted into a re-test window: the window (its reservation), since when (UTC,
    to the second), the drain reason the node stands for meanwhile, and the comment the note replaced (`before`,
    put back when the window closes)."""

    window: str
    since: datetime
    reason: str
    before: str = ""

    def text(self) -> str:
        """The note as the node's comment holds it."""
        note = f"{self.window} {self.since.astimezone(timezone.utc):{_WINDOW_TIME}} {self.reason}"
        return f"{note} || {self.before}" if self.before else note


def window_mark(comment: str) -> WindowMark | None:
    """The re-test window note a node's comment is (`WindowMark.text`), or None when it is anything else."""
    found = _WINDOW.fullmatch(comment)
    try:
        since = datetime.strptime(found[2], _WINDOW_TIME) if found else None
    except ValueError:  # the shape of a time, not a time (month 13)
        since = None
    return WindowMark(found[1], since.replace(tzinfo=timezone.utc), found[3], found[4] or "") if found and since \
        else None


# ---- Kubernetes' shape: taints, labels, annotations ---------------------------------------------------------------

HEALTH_LABEL = "gpuval.io/health"            # pass | warn | fail | error | skipped: the last run's verdict
RUN_LABEL = "gpuval.io/health-run"           # that run's id (label-safe), to find its records
FAULTS_ANNOTATION = "gpuval.io/health-faults"  # the failed fault codes, while gpuval's taint is on
TIME_ANNOTATION = "gpuval.io/health-time"    # when the verdict was set (UTC)
ACTIONS_ANNOTATION = "gpuval.io/health-actions"  # what the failed checks suggest (reset-gpu, reboot), while tainted
# "<UTC time> <run id>": when gpuval's taint and its codes were last written, and by which run (written only then,
# never by a verdict that leaves them: what the drain brake orders its drains by, and who may give one back)
MARK_ANNOTATION = "gpuval.io/health-mark"
TAINT_KEY = "gpuval.io/unhealthy"
TAINT_EFFECT = "NoSchedule"
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], starting and ending with a letter or digit."""
    return _LABEL_BAD.sub("-", text).strip("-_.")[:63].rstrip("-_.")


def mark_of(annotations: Mapping[str, Any]) -> tuple[datetime | None, str]:
    """(when, by which run) gpuval's taint and codes were last written (MARK_ANNOTATION), an aware time (a time
    without a zone is UTC); a node tainted by a gpuval before the mark: its verdict's time (TIME_ANNOTATION) and no
    run."""
    when, _, run = str(annotations.get(MARK_ANNOTATION) or "").partition(" ")
    if not when:
        when, run = str(annotations.get(TIME_ANNOTATION) or ""), ""
    try:
        at = datetime.fromisoformat(when)
    except ValueError:
        return None, run
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)), run


def own_taint() -> dict[str, str]:
    """gpuval's taint: its key with NoSchedule (the same key with another effect is someone else's)."""
    return {"key": TAINT_KEY, "effect": TAINT_EFFECT}


def is_own_taint(taint: dict[str, Any]) -> bool:
    return taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT


@dataclass
class NodeView:
    """What a Kubernetes node edit is computed from: the node's taints, labels and annotations as read."""

    taints: list[dict[str, Any]]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeEdit:
    """One change to a Kubernetes node: its new taint list (None: leave the list alone) and a merge patch of its
    metadata (labels and annotations; None deletes a key)."""

    taints: list[dict[str, Any]] | None
    metadata: dict[str, Any] = field(default_factory=dict)


# ---- the client ---------------------------------------------------------------------------------------------------


class NodePolicy(Protocol):
    """What to change on a node given what was read, in each scheduler's shape (operate.node_state writes one)."""

    def slurm(self, seen: SlurmNode) -> SlurmEdit:
        """The change to a Slurm node."""

    def kubernetes(self, seen: NodeView) -> NodeEdit:
        """The change to a Kubernetes node."""


class NodeClient(ABC):
    """One scheduler's way to change a node: read it, ask the policy, write what it says (again on a conflict)."""

    scheduler: ClassVar[str]

    @abstractmethod
    def edit(self, node: str, policy: NodePolicy) -> None:
        """Read `node`, ask `policy` for the change in this scheduler's shape, write it."""

    @abstractmethod
    def census(self, owner: "NodeOwner") -> "Census":
        """Every node of the cluster in one call: how many there are, and those out of service that `owner` says
        are its own, each with when its mark was last written."""


class NodeOwner(Protocol):
    """Whose drain a node carries, in each scheduler's shape (operate.brake writes gpuval's)."""

    def slurm(self, seen: SlurmNode) -> bool:
        """Whether this Slurm node (as listed: its state flags and reason) is held out of service by the owner."""

    def kubernetes(self, seen: NodeView) -> bool:
        """Whether this Kubernetes node (its taints, labels, annotations) is held out of service by the owner."""


@dataclass(frozen=True)
class HeldNode:
    """A node its owner holds out of service: its name, why (Slurm: the drain reason; Kubernetes: the fault codes
    annotation) and when that mark was last written (None: the scheduler does not say). Slurm's time is
    slurmctld's, to the second; Kubernetes' the annotation gpuval.io/health-time the node wrote with its taint.
    `window`: the re-test window it is lifted into (Slurm: its drain off while its re-test runs; `why` and `since`
    are then the window note's, `WindowMark`), "" when it is held by its mark itself."""

    name: str
    why: str
    since: datetime | None
    window: str = ""


@dataclass(frozen=True)
class Census:
    """A cluster as one listing showed it: its node count and the nodes an owner holds, in the listing's order."""

    nodes: int
    held: tuple[HeldNode, ...] = ()
