"""Node state actions after a health run, written once for `gpuval health --drain` and the fleet: THE policy (who
may lift what, when). It reaches a scheduler through the engines' node client (`gpuval.engines.node_client`): one
read-modify-write of the node, which asks the policy for the edit of its own shape (`_Policy.slurm`,
`_Policy.kubernetes`); the calls themselves (scontrol, the Kubernetes API) live in each scheduler's package under
engines/, in its nodes.py.

The verdict decides, the scheduler acts:
- FAIL: Slurm drains the node with the reason "gpuval: <fault codes> <run id>", then "; action <actions>" where a
  record suggests one (the Xid catalog's reset-gpu, reboot); Kubernetes labels it `gpuval.io/health=fail`, taints
  it `gpuval.io/unhealthy:NoSchedule` and annotates the codes and the actions (`gpuval.io/health-actions`).
- PASS or WARN: Slurm resumes the node only if gpuval drained it (its reason has gpuval's whole shape, `reason_of`:
  the prefix, at least one fault code, a run id of gpuval's own shape, maybe `; action ...`), never a node an admin or
  another tool (NHC, "NHC: ...") drained, nor one whose reason only starts with "gpuval:" ("gpuval: RMA-ticket-4711"
  is a person's); Kubernetes removes gpuval's taint, and only gpuval's.
- ERROR (could not run) and SKIPPED (nothing judged): no drain, no resume, no taint, no untaint. A check that could
  not run says nothing about the hardware (NHC #161: timeouts that drain nodes).
- `hold`: a PASS or WARN that must not lift gpuval's own drain or taint (a quick check while the node's last full
  check failed: only a later full pass lifts what a full failure set); the hold is said in the action's detail.
- Drains owned by fault code: a drain (the Slurm reason, `gpuval: CODES RUN`) or a taint (the annotation
  gpuval.io/health-faults) records the codes it stands for; a failure on a node gpuval already drained adds its
  codes. A pass lifts it only if it re-checked every one of them (`rechecked_codes`: the codes of its checks that
  passed or warned; a quick run adds those its kept full pass re-checked): a quick pass never lifts the fleet's
  FLEET_* drain nor a measured code only a full check sees; a fleet pass, a full pass, or a person does. A reason
  that lists fewer codes than it stands for (`+N`) is lifted by a person only.

Ownership is LBNL NHC's rule (helpers/node-mark-offline): a drained node whose reason is someone else's keeps that
reason, whatever gpuval finds. Every value that reaches scontrol or the Kubernetes API is made inert first: fault
codes are cut to the fault-code alphabet and a run id must be of gpuval's own shape, so no newline, quote or shell
character ever gets through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from gpuval.engines import nodes
from gpuval.engines.nodes import NodeClient, NodeEdit, NodeView, SlurmEdit, SlurmNode
from gpuval.errors import UsageError
from gpuval.operate.codes import Acted
from gpuval.results.data import HealthData
from gpuval.results.model import Result, Status, is_run_id
from gpuval.results.verdict import fault_codes, node_verdict

REASON_PREFIX = "gpuval:"
MAX_CODES = 6  # a Slurm reason stays one readable line in sinfo -R; the rest is counted, not listed
MAX_ACTIONS = 2  # the suggested actions a reason names ("; action reset-gpu"), strongest first
_NOT_CODE = re.compile(r"[^A-Z0-9_]")
CODE = re.compile(r"[A-Z][A-Z0-9_]{0,39}")  # the fault-code alphabet: ECC_ERRORS, FLEET_SLOW, XID_ERROR
_ACTION = re.compile(r"[a-z][a-z-]{0,23}")
_MORE = re.compile(r"\+\d{1,5}")  # "+3": codes the reason stands for but does not list
# One node, never a list: "n1,n2" or "n[1-9]" would make scontrol act on several nodes.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


@dataclass(frozen=True)
class NodeAction:
    """What was done to one node (`action`, operate.codes.Acted: drained, resumed, tainted, untainted, unchanged,
    not drained / not tainted when the drain brake held it back, ...), for which verdict, and why (`detail`)."""

    scheduler: str
    node: str
    verdict: Status
    action: Acted
    detail: str

    def to_json(self) -> dict[str, str]:
        """The action as JSON (`--json`, the evidence bundle): the edge where it becomes words."""
        return {"scheduler": self.scheduler, "node": self.node, "verdict": self.verdict.value,
                "action": self.action.value, "detail": self.detail}


def verdict_of(records: Iterable[Result]) -> tuple[Status, list[str]]:
    """THE node verdict (results.verdict.node_verdict) of a run's records, as the scheduler acts on it: its status
    and the fault codes of the records that failed, sorted (a failed health record's own codes, several on a quick
    check's record that carries the last full check's failure; a failed record without one named by its check)."""
    verdict = node_verdict(records)
    return verdict.status, sorted(verdict.fault_codes)


def safe_codes(codes: Sequence[str]) -> list[str]:
    """Fault codes in the fault-code alphabet (`CODE`: upper case, digits, '_', starting with a letter; a lower-case
    name such as an imported record's check is upper-cased, anything else dropped), empty ones dropped, duplicates
    removed, order kept."""
    out: dict[str, None] = {}  # ordered and linear: 100k codes from a poisoned file take milliseconds
    for code in codes:
        clean = _NOT_CODE.sub("", str(code)[:200].upper()).lstrip("0123456789_")[:40]
        if clean:
            out.setdefault(clean, None)
    return list(out)


def rechecked_codes(records: Iterable[Result]) -> list[str]:
    """The fault codes a run judged healthy again: those of its records that passed or warned (a check that
    failed, could not run or was skipped re-checked nothing)."""
    return sorted({code for r in records if r.status in (Status.PASS, Status.WARN) for code in fault_codes(r)})


def suggested_actions(records: Iterable[Result]) -> list[str]:
    """The actions the failed records suggest (a health record's `details.action`, e.g. reset-gpu from the Xid
    catalog), each a short lower-case token (anything else is dropped), at most MAX_ACTIONS, in record order."""
    found: dict[str, None] = {}
    for r in records:
        action = r.data.details.get("action") if r.status is Status.FAIL and isinstance(r.data, HealthData) else None
        if isinstance(action, str) and _ACTION.fullmatch(action):
            found.setdefault(action, None)
    return list(found)[:MAX_ACTIONS]


@dataclass(frozen=True)
class DrainReason:
    """A Slurm reason of gpuval's shape, read: the codes it lists, whether it stands for more (`+N`), its run id and
    the actions it suggests."""

    codes: tuple[str, ...]
    run_id: str
    more: bool = False
    actions: tuple[str, ...] = ()


def reason_of(reason: str) -> DrainReason | None:
    """gpuval's drain reason read (`gpuval: C1 C2 [+N] RUN[; action A B]`, as `drain_reason` writes it), or None
    when the reason is not gpuval's whole shape: another prefix, no code, a word that is no fault code, a run id of
    another shape, any other tail. A person's "gpuval: RMA-ticket-4711-do-not-resume" is a person's."""
    if not reason.startswith(REASON_PREFIX + " "):
        return None
    head, sep, tail = reason[len(REASON_PREFIX) + 1:].partition("; action ")
    words = head.split(" ")
    actions = tail.split(" ") if sep else []
    if len(words) < 2 or not is_run_id(words[-1]) or not CODE.fullmatch(words[0]):
        return None
    codes, more = words[:-1], bool(_MORE.fullmatch(words[-2]))
    codes = codes[:-1] if more else codes
    if not all(CODE.fullmatch(c) for c in codes) or (sep and not 0 < len(actions) <= MAX_ACTIONS):
        return None
    if not all(_ACTION.fullmatch(a) for a in actions):
        return None
    return DrainReason(tuple(codes), words[-1], more, tuple(actions))


def held_reason(why: str) -> DrainReason:
    """Why gpuval holds a node, as its census gives it (HeldNode.why): a Slurm drain reason (`reason_of`), or a
    Kubernetes annotation, which is the codes alone (no run id, nothing more, no action)."""
    return reason_of(why) or DrainReason(tuple(why.split()), "", False, ())


def drain_codes(reason: str) -> list[str] | None:
    """The fault codes gpuval's drain reason stands for; None when the reason is not gpuval's (`reason_of`) or lists
    fewer codes than it stands for (`+N`)."""
    read = reason_of(reason)
    return None if read is None or read.more else list(read.codes)


def merged_codes(held: Sequence[str] | None, new: Sequence[str], rechecked: Sequence[str] | None = None) -> list[str]:
    """The codes a drain stands for once a new failure is added to what it already held, less the held codes
    this run re-checked and found healthy (order kept)."""
    healthy = set(rechecked or [])
    return safe_codes([*(c for c in held or [] if c not in healthy), *new])


def lift_hold(codes: Sequence[str] | None, rechecked: Sequence[str] | None) -> str:
    """Why a pass must not lift gpuval's drain standing for `codes` ("" when it may): a code it did not re-check.
    `rechecked` None: a caller that names no codes (every gpuval drain may be lifted, the rule before codes)."""
    if rechecked is None:
        return ""
    if codes is None:
        return "its reason stands for more fault codes than it lists: a person lifts it"
    seen = set(rechecked)
    missing = [c for c in codes if c not in seen]
    if not missing:
        return ""
    return (f"this run did not re-check {' '.join(missing)} (a check that re-checks each lifts it: the fleet for "
            "FLEET_*, a full check for what only it measures; or a person)")


def check_run_id(run_id: str) -> str:
    """The run id if it is of gpuval's own shape (`results.model.is_run_id`): a drain names the run whose records
    and evidence show why, and only a reason with such an id is gpuval's to lift later."""
    if not is_run_id(str(run_id)):
        raise UsageError(f"run id {str(run_id)[:80]!r}: a node action names gpuval's own run id "
                         "(YYYYMMDDTHHMMSSZ-hhhhhh, as gpuval names its runs)")
    return run_id


def drain_reason(codes: Sequence[str], run_id: str, actions: Sequence[str] = ()) -> str:
    """`gpuval: CODE CODE <run id>[; action A]`: the prefix marks the drain as gpuval's, the run id finds the
    records and the evidence, the suggested actions (short tokens; ';' is in neither alphabet before it) tell what
    brings the node back. What convicted the node in detail is in its evidence bundle (operate.evidence), keyed by
    the run id: the reason stays one short line."""
    clean = safe_codes(codes) or ["FAIL"]
    shown = clean[:MAX_CODES] + ([f"+{len(clean) - MAX_CODES}"] if len(clean) > MAX_CODES else [])
    todo = [a for a in actions if _ACTION.fullmatch(str(a))][:MAX_ACTIONS]
    return f"{REASON_PREFIX} {' '.join(shown)} {check_run_id(run_id)}" + (f"; action {' '.join(todo)}" if todo else "")


def check_node(node: str) -> str:
    """The node name if it is one name (a list such as n1,n2 or a pattern such as n[1-9] is refused)."""
    if not _NODE.fullmatch(str(node)):
        raise UsageError(f"--node {node!r}: one node name (letters, digits, '.', '_', '-'), not a list or pattern")
    return node


def apply(verdict: Status, node: str, run_id: str, fault_codes: Sequence[str], client: NodeClient, *,
          hold: str = "", rechecked: Sequence[str] | None = None, actions: Sequence[str] = (),
          admit: Callable[..., str] | None = None) -> NodeAction:
    """Act on one node after a run through its scheduler's `client` (`gpuval.engines.node_client`): drain/taint on
    FAIL, resume/untaint (gpuval's own only) on PASS or WARN unless `hold` says why not or the drain stands for a
    code not in `rechecked` (see `lift_hold`), nothing on ERROR or SKIPPED. `actions`: the suggested actions a Slurm
    drain reason names. `admit`: asked right before a node gpuval does not hold yet is drained or tainted (the drain
    brake, operate.brake): "" lets it, anything else is why not (the node is left out of service's way, labelled
    on Kubernetes); told `admit(True)` when this run writes gpuval's own mark again (new codes: Slurm stamps the
    reason anew, the mark annotation takes this run), which makes that mark this run's to give back. One
    read-modify-write of the node."""
    policy = _Policy(Status(verdict), check_run_id(run_id), fault_codes, hold, rechecked, tuple(actions), admit)
    client.edit(check_node(node), policy)
    return NodeAction(client.scheduler, node, policy.verdict, policy.action, policy.detail)


@dataclass
class _Policy:
    """The node edit of one verdict, in each scheduler's shape (engines.nodes.NodePolicy); what it decided is kept
    for the NodeAction (the last decision counts: a node read again after a conflict is decided again)."""

    verdict: Status
    run_id: str
    fault_codes: Sequence[str]
    hold: str = ""
    rechecked: Sequence[str] | None = None
    actions: Sequence[str] = ()
    admit: Callable[..., str] | None = None
    action: Acted = Acted.UNCHANGED
    detail: str = ""

    def slurm(self, seen: SlurmNode) -> SlurmEdit:
        """Drain, resume or leave the node (see `decide`); the drain's codes decide what lifts it."""
        mine = seen.drained and ours(seen)
        held = drain_codes(seen.reason) if mine else []
        action, why = decide(self.verdict, seen, self.hold or (lift_hold(held, self.rechecked) if mine else ""))
        if action is Acted.DRAINED and held is None:
            self.action, self.detail = Acted.UNCHANGED, (f"gpuval's drain ({seen.reason!r}) kept: it stands for "
                                                         "more fault codes than it lists")
            return SlurmEdit()
        why_not = self.admit() if action is Acted.DRAINED and not mine and self.admit is not None else ""
        if why_not:
            self.action, self.detail = Acted.NOT_DRAINED, why_not
            return SlurmEdit()
        if action is Acted.DRAINED:
            codes = merged_codes(held, self.fault_codes, self.rechecked)
            if mine and _same_drain(seen.reason, codes, self.actions):
                self.action, self.detail = Acted.UNCHANGED, (f"{why}: gpuval's drain ({seen.reason!r}) already "
                                                             "stands for these codes: kept, with the run that first "
                                                             "found them")
                return SlurmEdit()
            kept = reason_of(seen.reason) if mine else None
            reason = drain_reason(codes, self.run_id, list(dict.fromkeys([*(kept.actions if kept else ()),
                                                                          *self.actions])))
            self.action, self.detail = Acted.DRAINED, f"{why}: reason {reason!r}"
            if mine:
                self._moved()
            return SlurmEdit("drain", reason)
        self.action, self.detail = action, why
        return SlurmEdit("undrain") if action is Acted.RESUMED else SlurmEdit()

    def kubernetes(self, seen: NodeView) -> NodeEdit:
        """Label the node with the verdict and run id; taint it on FAIL, untaint (gpuval's taint only) on PASS/WARN
        that re-checked every code of the taint (its annotation)."""
        held = _held_codes(seen)
        held_hold = (self.hold or lift_hold(held, self.rechecked)) if held else self.hold
        new_taints, self.action = plan_taints(self.verdict, seen.taints, held_hold)
        why_not = self.admit() if self.action is Acted.TAINTED and self.admit is not None else ""
        if why_not:
            new_taints, self.action = None, Acted.NOT_TAINTED
        tainted = any(t.get("key") == nodes.TAINT_KEY for t in seen.taints)
        self.detail = why_not or _kube_detail(self.action, self.verdict, held_hold, tainted)
        codes = merged_codes(held, self.fault_codes, self.rechecked) if self.verdict is Status.FAIL \
            else self.fault_codes
        if self.verdict is Status.FAIL and held and codes != held:  # new codes on gpuval's own taint: its mark
            self.action, self.detail = Acted.TAINTED, (f"failed checks: gpuval's taint {nodes.TAINT_KEY} kept, now "
                                                       f"for {' '.join(codes)}")
            self._moved()
        held_actions = str(seen.annotations.get(nodes.ACTIONS_ANNOTATION) or "").split() if held else []
        patch = metadata_patch(self.verdict, self.run_id, codes, datetime.now(timezone.utc), held_hold,
                               [*held_actions, *self.actions], marked=self.action is Acted.TAINTED)
        if why_not:  # the codes and actions annotations stand for gpuval's taint: none without it
            patch["annotations"].pop(nodes.FAULTS_ANNOTATION, None)
            patch["annotations"].pop(nodes.ACTIONS_ANNOTATION, None)
        return NodeEdit(new_taints, patch)

    def _moved(self) -> None:
        """gpuval's own mark is written again by this run (new codes: its time and its run are this run's): the
        drain brake takes it as this run's to give back (operate.brake)."""
        if self.admit is not None:
            self.admit(True)


# ---- Slurm: drain and resume -----------------------------------------------------------------------------------


def _same_drain(reason: str, codes: Sequence[str], actions: Sequence[str]) -> bool:
    """Whether gpuval's drain `reason` already lists exactly `codes` and every suggested action of `actions`."""
    read = reason_of(reason)
    wanted = [a for a in actions if _ACTION.fullmatch(str(a))][:MAX_ACTIONS]
    return read is not None and list(read.codes) == list(codes) and set(wanted) <= set(read.actions)


def ours(node: SlurmNode) -> bool:
    """Whether gpuval set the node's reason (NHC's rule, made strict: the reason has gpuval's whole shape,
    `reason_of`; the prefix alone is anyone's to type)."""
    return reason_of(node.reason) is not None


def decide(verdict: Status, node: SlurmNode, hold: str = "") -> tuple[Acted, str]:
    """(DRAINED | RESUMED | UNCHANGED, why): what the verdict does to the Slurm node, pure, the whole ownership rule
    in one place (the drain brake and the codes a drain stands for may still keep a drain from happening: `_Policy`).
    `hold`: why a PASS or WARN must not lift gpuval's own drain now."""
    if verdict is Status.FAIL:
        if (node.drained or node.down) and node.reason and not ours(node):
            return Acted.UNCHANGED, f"already {node.state} with someone else's reason ({node.reason!r}): left as it is"
        return Acted.DRAINED, "failed checks"
    if verdict in (Status.PASS, Status.WARN):
        if node.drained and ours(node) and hold:
            return Acted.UNCHANGED, f"gpuval's drain ({node.reason!r}) kept: {hold}"
        if node.drained and ours(node):
            return Acted.RESUMED, f"healthy again; gpuval's drain ({node.reason!r}) lifted"
        if node.drained:
            return Acted.UNCHANGED, f"drained by someone else ({node.reason!r}): not resumed"
        return Acted.UNCHANGED, f"healthy, in service ({node.state})"
    what = "could not run" if verdict is Status.ERROR else "nothing was judged"
    return Acted.UNCHANGED, f"{what}: node state left as it is ({node.state})"


# ---- Kubernetes: label, taint and untaint ----------------------------------------------------------------------


def plan_taints(verdict: Status, taints: list[dict[str, Any]],
                hold: str = "") -> tuple[list[dict[str, Any]] | None, Acted]:
    """The node's new taint list (None: leave the list alone) and the action: pure, the whole rule in one place.
    `hold`: why a PASS or WARN must not remove gpuval's taint now."""
    mine = [t for t in taints if nodes.is_own_taint(t)]
    if verdict is Status.FAIL:
        return (None, Acted.UNCHANGED) if mine else ([*taints, nodes.own_taint()], Acted.TAINTED)
    if verdict in (Status.PASS, Status.WARN) and hold:
        return None, Acted.UNCHANGED
    if verdict in (Status.PASS, Status.WARN):
        return ([t for t in taints if t not in mine], Acted.UNTAINTED) if mine else (None, Acted.UNCHANGED)
    return None, Acted.UNCHANGED  # ERROR, SKIPPED: says nothing about the hardware


def metadata_patch(verdict: Status, run_id: str, codes: Sequence[str], now: datetime,
                   hold: str = "", actions: Sequence[str] = (), marked: bool = False) -> dict[str, Any]:
    """Labels and annotations of one verdict (merge patch: None deletes a key); under a hold the fault codes and
    suggested actions of the taint that stays are kept. `actions`: what the failed checks suggest (the Slurm drain
    reason's "; action ..."), in the actions annotation. `marked`: gpuval's taint and its codes are written now
    (new, or new codes): the mark annotation gets this time and run (nodes.MARK_ANNOTATION), which no other verdict
    writes."""
    stamp = now.isoformat(timespec="seconds")
    annotations: dict[str, Any] = {nodes.TIME_ANNOTATION: stamp}
    if marked:
        annotations[nodes.MARK_ANNOTATION] = f"{stamp} {check_run_id(run_id)}"
    if verdict is Status.FAIL:
        annotations[nodes.FAULTS_ANNOTATION] = " ".join(safe_codes(codes)) or "FAIL"
        todo = list(dict.fromkeys(a for a in actions if _ACTION.fullmatch(str(a))))[:MAX_ACTIONS]
        annotations[nodes.ACTIONS_ANNOTATION] = " ".join(todo) or None
    elif verdict in (Status.PASS, Status.WARN) and not hold:
        annotations[nodes.FAULTS_ANNOTATION] = None
        annotations[nodes.ACTIONS_ANNOTATION] = None
        annotations[nodes.MARK_ANNOTATION] = None
    run = nodes.label_value(run_id) or "unknown-run"
    return {"labels": {nodes.HEALTH_LABEL: verdict.value, nodes.RUN_LABEL: run}, "annotations": annotations}


def _kube_detail(action: Acted, verdict: Status, hold: str = "", tainted: bool = False) -> str:
    taint = nodes.TAINT_KEY
    if hold and tainted and verdict in (Status.PASS, Status.WARN):
        return f"labelled {verdict.value}; gpuval's taint {taint} kept: {hold}"
    if action is Acted.TAINTED:
        return f"failed checks: tainted {taint}:{nodes.TAINT_EFFECT}"
    if action is Acted.UNTAINTED:
        return f"healthy again: gpuval's taint {taint} removed"
    if verdict in (Status.ERROR, Status.SKIPPED):
        return f"labelled {verdict.value}; taints left as they are (nothing judged)"
    return f"labelled {verdict.value}"


def _held_codes(seen: NodeView) -> list[str]:
    """The fault codes gpuval's taint on the node stands for (its annotation), [] when it has no such taint."""
    if not any(nodes.is_own_taint(t) for t in seen.taints):
        return []
    return safe_codes(str(seen.annotations.get(nodes.FAULTS_ANNOTATION) or "FAIL").split())
