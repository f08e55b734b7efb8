"""The drain brake: gpuval holds at most a cap of nodes drained at once, counted in the scheduler's own state, so one
bad baseline, driver or shared part fails the fleet's checks without emptying the fleet.

What it counts: `drained_by_gpuval`, every node the scheduler shows held by gpuval's mark (Slurm: drained with
gpuval's reason, or lifted into a `gpuval fleet retest` window with gpuval's note of that reason in its comment;
Kubernetes: gpuval's taint, which a re-test keeps), never a person's or another tool's drain. A node in a re-test
window is held all along (the note is written with the lift, and the comment put back with the drain again, each one
update): so the drain again at the window's close is no new drain and asks nothing of the brake; the count it
meets is the one every actor counted it in. The cap (`DrainCap`):
`--max-drain N` nodes, a share of the cluster's nodes (`5%`, never under 2 nodes), `0` (report, drain nothing) or
`all` (no cap); its default is the site's, GPUVAL_MAX_DRAIN, else 5%.

Who acts, and how the cap holds when many act at once with no lock between them (`Brake`): before a node is drained
anew (node_state's policy asks through `Brake.gate`: a node gpuval already holds is no new drain), the cluster is
counted once; a node is drained only while gpuval holds fewer than the cap. Several actors may all pass that count
at once (every node of a `health --drain` wave, each on its own host), so each counts again after its drains
(`Brake.settle`), once the scheduler's clock has moved past them (SETTLE_S), and gives back each of its own new
drains that has the cap's worth of drains ahead of it: every drain it saw before it drained, and every other one
listed earlier by (mark time, node name). Of the new drains that stay, the one listed last sees every other one
and every drain older than the wave, so at most the cap stays drained, whatever the interleaving. Slurm's mark time
is slurmctld's own (the reason's time, to the second): the wait makes every drain stamped no later than this one
visible. Kubernetes' is the node's clock (the mark annotation written with the taint and its codes, and by no
verdict that leaves them: engines.nodes.MARK_ANNOTATION): the same holds while node clocks agree and a patch lands
within the wait. A mark's time moves only when gpuval writes that mark again (new codes on its own drain: Slurm
stamps the new reason), and whoever writes it again takes it on: the reason or the mark names that run, the only one
that may give it back, and that run counts it as its own new drain at its new place (`gate`, told `moved`). So
every mark in the order has an actor that saw what is ahead of it, however others rewrite it (before, a drain
rewritten mid-wave moved to the end of the order where its first actor could no longer give it back: one over the
cap). A count that cannot be taken drains nothing (the action fails, exit 2).

Many nodes failing with one fault code at once (`shared_faults`: a code on more nodes than the cap's share of the
nodes checked, seen by a fleet check, which judges many nodes in one process) is one finding about what they share,
not that many broken nodes: none of them is drained for it.

The brake counts NVL72 racks too (`rack_faults`): more than RACK_TOLERANCE trays of one rack failing at once is one
finding about the rack (its NVLink domain, its power or cooling, a reboot wave), not that many drains: none of its
trays is drained for it. CoreWeave's rule for GB200 NVL72: "workloads should tolerate up to two unavailable Nodes per
rack ... If a rack experiences more than two unavailable Nodes, the entire rack is cordoned"
(docs.coreweave.com/docs/platform/instances/gb200): past two, the rack is one matter for a person, not a tray count.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from gpuval.engines.nodes import (
    ACTIONS_ANNOTATION, FAULTS_ANNOTATION, MARK_ANNOTATION, RUN_LABEL, Census, HeldNode, NodeClient, NodeEdit,
    NodeView, SlurmEdit, SlurmNode, is_own_taint, label_value, mark_of,
)
from gpuval.errors import GpuvalError, UsageError
from gpuval.operate.codes import Acted
from gpuval.operate.node_state import NodeAction, ours, reason_of
from gpuval.results.model import Status

ENV_VARIABLE = "GPUVAL_MAX_DRAIN"
DEFAULT = "5%"
MIN_SHARE_NODES = 2  # a share never caps under 2 nodes: 5% of a small cluster is under one node
SETTLE_S = 2.0  # after a new drain, before counting again: past slurmctld's one-second reason time, and node clocks
_SHARE = re.compile(r"(\d{1,3}(?:\.\d{1,3})?)%")
_COUNT = re.compile(r"\d{1,7}")
HOW_TO_PROCEED = ("to proceed: find what the failing nodes share (the baseline or --baseline file, the driver or "
                  "firmware, the image, a switch or a power feed), fix it and check again; where the nodes really "
                  "are broken, drain them with a higher --max-drain (N nodes, or a share such as 10%) or "
                  f"--max-drain all, or by hand (the site's default: {ENV_VARIABLE})")
SHARED = "suspect the baseline, the software or a shared part, not the nodes"


@dataclass(frozen=True)
class DrainCap:
    """How many nodes gpuval may hold drained at once: `count` nodes, or `share` of the cluster's nodes (at least
    MIN_SHARE_NODES), or no cap (neither: `all`). `text` and `source` say what was given where, for messages."""

    count: int | None = None
    share: float | None = None
    text: str = DEFAULT
    source: str = "the default"

    @property
    def lifted(self) -> bool:
        return self.count is None and self.share is None

    def limit(self, nodes: int) -> int | None:
        """The most nodes gpuval may hold drained among `nodes`; None without a cap."""
        if self.count is not None:
            return self.count
        if self.share is None:
            return None
        return max(MIN_SHARE_NODES, math.ceil(round(self.share * nodes, 6)))

    def describe(self, nodes: int) -> str:
        """'13 (5% of 256 nodes, at least 2; the default)'."""
        if self.share is not None:
            return f"{self.limit(nodes)} ({self.text} of {nodes} nodes, at least {MIN_SHARE_NODES}; {self.source})"
        return f"{self.text} ({self.source})"


def parse_cap(text: str, source: str) -> DrainCap:
    """A cap as written: N nodes (0: drain none), a share of the cluster (5%, 12.5%) or `all`; anything else is a
    one-line error naming `source`."""
    given = str(text).strip()
    if given.lower() == "all":
        return DrainCap(text="all", source=source)
    if _COUNT.fullmatch(given):
        return DrainCap(count=int(given), text=given, source=source)
    share = _SHARE.fullmatch(given)
    if share and 0 < float(share[1]) <= 100:
        return DrainCap(share=float(share[1]) / 100, text=given, source=source)
    raise UsageError(f"{source} {given[:40]!r}: give a number of nodes (0: drain none), a share of the cluster's "
                     "nodes (5%) or all")


def site_cap(given: str | None, env: Mapping[str, str] | None = None) -> DrainCap:
    """The cap in force: `--max-drain` when given, else the site's GPUVAL_MAX_DRAIN, else DEFAULT."""
    env = os.environ if env is None else env
    if given is not None:
        return parse_cap(given, "--max-drain")
    if env.get(ENV_VARIABLE, "").strip():
        return parse_cap(env[ENV_VARIABLE], ENV_VARIABLE)
    return parse_cap(DEFAULT, "the default")


# ---- what gpuval holds ------------------------------------------------------------------------------------------


class _Gpuval:
    """gpuval's own drains, by node_state's ownership rule (engines.nodes.NodeOwner), and its re-test windows' nodes
    (not drained, noted with gpuval's reason: `SlurmNode.window`)."""

    def slurm(self, seen: SlurmNode) -> bool:
        if seen.drained:
            return ours(seen)
        note = seen.window
        return note is not None and reason_of(note.reason) is not None

    def kubernetes(self, seen: NodeView) -> bool:
        return any(is_own_taint(t) for t in seen.taints)


def drained_by_gpuval(client: NodeClient) -> Census:
    """The cluster's node count and every node gpuval holds out of service now (Slurm: drained with gpuval's
    reason, or lifted into a re-test window, `HeldNode.window`; Kubernetes: gpuval's taint), each with its reason or
    fault codes and since when; one scheduler call."""
    return client.census(_Gpuval())


def shared_faults(codes: Mapping[str, Sequence[str]], checked: int, cap: DrainCap) -> dict[str, list[str]]:
    """code -> its failed nodes (in `codes`' order), for each fault code on more nodes than the cap allows of the
    `checked` nodes (its share of them, or its count; at least MIN_SHARE_NODES): a finding about what those nodes
    share. {} when the cap is lifted."""
    limit = cap.limit(checked)
    if limit is None:
        return {}
    by_code: dict[str, list[str]] = {}
    for node, found in codes.items():
        for code in dict.fromkeys(found):
            by_code.setdefault(code, []).append(node)
    return {c: nodes for c, nodes in by_code.items() if len(nodes) > max(limit, MIN_SHARE_NODES)}


RACK_TOLERANCE = 2  # trays of one rack that may fail at once before the rack is one finding (CoreWeave: above)


def rack_faults(failed: Sequence[str], rack_of: Mapping[str, str]) -> dict[str, list[str]]:
    """rack -> its failed trays (in `failed`'s order), for each rack with more than RACK_TOLERANCE of its trays
    failing at once; nodes in no rack are never counted."""
    by_rack: dict[str, list[str]] = {}
    for node in failed:
        if node in rack_of:
            by_rack.setdefault(rack_of[node], []).append(node)
    return {rack: nodes for rack, nodes in by_rack.items() if len(nodes) > RACK_TOLERANCE}


def rack_reason(node: str, faults: Mapping[str, list[str]], rack_of: Mapping[str, str]) -> str:
    """Why a tray is not drained for failing ("" unless its rack has more than RACK_TOLERANCE trays failing)."""
    rack = rack_of.get(node)
    if rack is None or rack not in faults:
        return ""
    return (f"{len(faults[rack])} trays of rack {rack} fail at once, more than {RACK_TOLERANCE}: one rack finding, "
            "not a drain per tray (CoreWeave cordons a rack with more than two unavailable nodes)")


def shared_reason(node_codes: Sequence[str], shared: Mapping[str, list[str]], checked: int) -> str:
    """Why a node is not drained for its codes ("" when one of them is its own): every one of them fails on too
    many nodes at once."""
    if not node_codes or any(c not in shared for c in node_codes):
        return ""
    return "; ".join(f"{c} fails on {len(shared[c])} of {checked} nodes: {SHARED}" for c in dict.fromkeys(node_codes))


# ---- one actor's drains under the cap ---------------------------------------------------------------------------


def _order(node: HeldNode) -> tuple[int, float, str]:
    """(mark time, name); a mark of no known time first (it counts against every other)."""
    return (1, node.since.timestamp(), node.name) if node.since else (0, 0.0, node.name)


def beyond_cap(mine: Sequence[str], before: set[str], held: Sequence[HeldNode], limit: int) -> list[str]:
    """Which of this actor's new drains (`mine`) to give back, given what the scheduler lists now (`held`): each
    with `limit` or more drains ahead of it (every held node that was held before this actor drained, `before`,
    and every other one listed earlier by (mark time, name)). Pure; linear after one sort."""
    wanted = set(mine)
    earlier = sum(1 for h in held if h.name in before)
    out: list[str] = []
    passed_before = 0
    for position, node in enumerate(sorted(held, key=_order)):
        if node.name in before:
            passed_before += 1
        elif node.name in wanted and position - passed_before + earlier >= limit:
            out.append(node.name)
    return out


@dataclass
class _GiveBack:
    """Lift a drain this run made (its reason or label names this run), and nothing else (engines.nodes.NodePolicy)."""

    run_id: str
    done: bool = False

    def slurm(self, seen: SlurmNode) -> SlurmEdit:
        read = reason_of(seen.reason) if seen.drained else None  # THE reading of gpuval's reason (node_state)
        self.done = read is not None and read.run_id == self.run_id
        return SlurmEdit("undrain") if self.done else SlurmEdit()

    def kubernetes(self, seen: NodeView) -> NodeEdit:
        _when, run = mark_of(seen.annotations)  # the run that wrote gpuval's taint and codes last
        self.done = any(is_own_taint(t) for t in seen.taints) and (
            run == self.run_id if run else seen.labels.get(RUN_LABEL) == label_value(self.run_id))
        if not self.done:
            return NodeEdit(None)
        return NodeEdit([t for t in seen.taints if not is_own_taint(t)], {"annotations": {
            FAULTS_ANNOTATION: None, ACTIONS_ANNOTATION: None, MARK_ANNOTATION: None}})


@dataclass
class Brake:
    """One actor's new drains under the cap: a fleet check's, or one node's `health --drain`. `gate(node)` is what
    node_state's policy asks before it drains a node anew; `settle(actions)` counts again after the drains and gives
    back what the cap has no room for. What it held back or gave back, and why, is kept for the finding."""

    client: NodeClient
    cap: DrainCap
    run_id: str
    settle_s: float | None = None  # [default: SETTLE_S]
    before: Census | None = None
    latest: Census | None = None  # the last count taken (after the drains, once settled)
    limit: int | None = None
    admitted: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # gpuval's own marks this actor wrote again (new codes)
    held_back: dict[str, str] = field(default_factory=dict)
    decided: dict[str, str] = field(default_factory=dict)

    def gate(self, node: str, shared: str = "") -> Callable[..., str]:
        """The question node_state asks right before it drains `node` anew: "" to drain it, else why not (`shared`:
        its codes fail on too many nodes). Asked again (a node read again after a conflict), it answers the same.
        Told `moved` (node_state writes gpuval's own mark on `node` again: Slurm's reason time and the mark
        annotation move to now and name this run), it lets it (no node more is held) and takes the mark as this
        actor's new drain: counted first, given back by this actor if the cap has no room for it at its new place."""
        def ask(moved: bool = False) -> str:
            if moved:
                self._moved(node)
                return ""
            if node not in self.decided:
                self.decided[node] = why = self._why_not(node, shared)
                if why:
                    self.held_back[node] = why
                elif not self.cap.lifted and not self._counted(node):
                    self.admitted.append(node)
            return self.decided[node]
        return ask

    def _moved(self, node: str) -> None:
        if node not in self.moved:
            self.moved.append(node)
        if self.before is None and not self.cap.lifted and self.cap.count != 0:
            self.before = self.latest = drained_by_gpuval(self.client)
            self.limit = self.cap.limit(self.before.nodes)

    def _counted(self, node: str) -> bool:
        """Whether the count before this actor's drains holds `node` already."""
        return self.before is not None and any(h.name == node for h in self.before.held)

    def _why_not(self, node: str, shared: str) -> str:
        if shared:
            return shared
        if self.cap.lifted:
            return ""
        if self.cap.count == 0:
            self.limit = 0
            return f"the drain brake: a cap of 0 ({self.cap.source}): report only, drain nothing"
        if self.before is None:
            self.before = self.latest = drained_by_gpuval(self.client)
            self.limit = self.cap.limit(self.before.nodes)
        if self._counted(node):
            return ""  # held already (a node lifted into a re-test window, drained again): no node more is held
        held = len(self.before.held) + len(self.admitted)
        if self.limit is not None and held >= self.limit:
            return (f"the drain brake: gpuval holds {held} nodes drained, its cap is "
                    f"{self.cap.describe(self.before.nodes)}")
        return ""

    def settle(self, actions: Sequence[NodeAction]) -> dict[str, NodeAction]:
        """After this actor's drains: wait SETTLE_S, count again, give back each new drain the cap leaves no room
        for; node -> its action now (NOT_DRAINED when given back; DRAINED when its drain changed since, NOT_GIVEN_BACK
        when the scheduler refused: either way it stays drained)."""
        mine = [a.node for a in actions if a.action.took_out and (a.node in self.admitted or a.node in self.moved)]
        if not mine or self.before is None or not self.limit:
            return {}
        time.sleep(SETTLE_S if self.settle_s is None else self.settle_s)
        after = self.latest = drained_by_gpuval(self.client)
        before = {h.name for h in self.before.held} - set(self.moved)  # a mark moved is a new drain at its new place
        why = (f"the drain brake: more nodes than its cap of {self.cap.describe(after.nodes)} were drained at "
               "once, and this node's drain came later by (time, node name)")
        done: dict[str, NodeAction] = {}
        for node in beyond_cap(mine, before, after.held, self.limit):
            done[node] = self._give_back(node, why)
            if done[node].action is Acted.NOT_DRAINED:
                self.held_back[node] = done[node].detail
        return done

    def advice(self, node: str, codes: Sequence[str]) -> str:
        """What a node held back adds to why (`held_back`): which of its codes the nodes gpuval holds share, and how
        to proceed ('' for a cap of 0: the user asked for a report)."""
        if self.cap.count == 0:
            return ""
        seen = same_code(codes, [h for h in self.latest.held if h.name != node] if self.latest else ())
        return f"{seen + ': ' if seen else ''}when many nodes fail at once, {SHARED}; {HOW_TO_PROCEED}"

    def details(self) -> dict[str, object]:
        """The cap and the count it was held to, for a record: the cap as given, where, its limit, the cluster's
        nodes, and the nodes gpuval held at the last count (after this actor's drains when it drained; at most 50
        named), less those this actor gave back."""
        held = [h.name for h in self.latest.held if h.name not in self.held_back] if self.latest else []
        return {"cap": self.cap.text, "source": self.cap.source, "limit": self.limit,
                "cluster_nodes": self.latest.nodes if self.latest else None, "held": len(held),
                "held_nodes": held[:50]}

    def _give_back(self, node: str, why: str) -> NodeAction:
        policy = _GiveBack(self.run_id)
        try:
            self.client.edit(node, policy)
        except GpuvalError as exc:
            return NodeAction(self.client.scheduler, node, Status.FAIL, Acted.NOT_GIVEN_BACK, f"{why}; {exc}")
        if not policy.done:  # another run or a person wrote the node since: theirs now
            return NodeAction(self.client.scheduler, node, Status.FAIL, Acted.DRAINED, f"its drain changed since "
                              f"(another run or a person): left as it is, though "
                              f"{why.removeprefix('the drain brake: ')}")
        return NodeAction(self.client.scheduler, node, Status.FAIL, Acted.NOT_DRAINED,
                          f"drained, then given back: {why}")


def same_code(codes: Sequence[str], held: Sequence[HeldNode]) -> str:
    """'ECC_ERRORS on 12 of the 12 nodes gpuval holds' for the first of `codes` any held node's mark names ('' when
    none does): what one node acting alone sees of a wave."""
    for code in codes:
        count = sum(code in h.why.split() for h in held)
        if count:
            return f"{code} on {count} of the {len(held)} nodes gpuval holds"
    return ""
