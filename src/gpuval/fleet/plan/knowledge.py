"""What the planner knows between rounds: every node's, link's and switch's evidence and where each stands."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

from gpuval.errors import UsageError
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.weighing import Calibration
from gpuval.fleet.plan.racks_book import RackBook, RackSpec
from gpuval.fleet.plan.terms import Evidence, Expect, FleetConfig, Round, Standing


class NodeStage(str, Enum):
    """Where a node stands. Only CLEARED nodes are lent as partners to suspects."""

    NEW = "new"              # its node suite is to run (again)
    READY = "ready"          # passed the node suite, waits for its first pair test
    CLEARED = "cleared"      # passed a pair test: known good
    SUSPECT = "suspect"      # a pair test with it failed or was not sure: re-test with known-good partners
    FAILED = "failed"        # convicted
    UNDECIDED = "undecided"  # max_retests spent without a decision
    NOT_RUN = "not_run"      # its tests could not run max_not_run times in a row


@dataclass
class NodeHistory:
    """One node's evidence and state."""

    name: str
    state: NodeStage = NodeStage.NEW
    evidence: list[Evidence] = field(default_factory=list)
    partners: set[str] = field(default_factory=set)
    good_fails: dict[str, Evidence] = field(default_factory=dict)  # partner -> failing test with that known-good one
    # partner -> a failing test whose partner, or the path to it, is not known good yet (rounds._settle_suspects)
    pending: dict[str, Evidence] = field(default_factory=dict)
    suite: list[Evidence] = field(default_factory=list)
    retests: int = 0
    not_run: int = 0  # could-not-run results in a row
    cross_done: bool = False
    warn: Standing | None = None  # why a cleared node still warns (it failed once, its health suite warns)
    unchecked: Standing | None = None  # a check of its health suite could not run: the node is not cleared (ERROR)
    cause: Cause = Cause.NOT_JUDGED  # why it failed / is undecided / could not run / was cleared
    reason: str = ""  # the same for people


class LinkStage(str, Enum):
    """A link's standing: OPEN (a test over it failed; waiting or to confirm) until decided."""

    UNTESTED = "untested"  # no test over it ran yet
    OPEN = "open"
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIPPED = "skipped"
    EXPLAINED = "explained"  # its failure is a switch uplink's
    NOT_RUN = "not_run"


@dataclass
class LinkHistory:
    """The tests between two nodes."""

    ends: tuple[str, str]
    evidence: list[Evidence] = field(default_factory=list)
    state: LinkStage = LinkStage.UNTESTED
    cause: Cause | None = None  # with reason, once a state that needs one is decided (verdicts.py has the rest)
    reason: str = ""

    def settle(self, state: LinkStage, cause: Cause, reason: str) -> None:
        """Decide the link: its state, why (cause) and the words for it."""
        self.state, self.cause, self.reason = state, cause, reason


@dataclass
class GroupRun:
    """A group all_reduce run for the full-scale check or one bisection step."""

    nodes: tuple[str, ...]
    purpose: str  # scale / bisect
    parent: int | None = None  # index of the group it is a half of
    evidence: Evidence | None = None
    finding: str = ""  # what this step concluded, for the verdicts


@dataclass
class FleetKnowledge:
    """Everything the planner has learned; plan_next reads it, record adds one round to it."""

    config: FleetConfig
    order: tuple[str, ...]
    groups: dict[str, str]
    expect: Expect | None
    nodes: dict[str, NodeHistory]
    links: dict[tuple[str, str], LinkHistory] = field(default_factory=dict)
    open_links: set[tuple[str, str]] = field(default_factory=set)
    uplink_evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    uplinks_failed: set[str] = field(default_factory=set)
    uplinks: dict[str, Standing] = field(default_factory=dict)  # switch -> its uplink's standing
    cross_finding: str = ""  # cross-switch pairs slow everywhere: the fabric, not one uplink
    calibration: Calibration = field(default_factory=Calibration)
    rounds: list[Round] = field(default_factory=list)
    group_runs: list[GroupRun] = field(default_factory=list)
    bisect_pending: list[int] = field(default_factory=list)  # indices into group_runs still to run
    scale_runs: int = 0
    scale_due: bool = True  # a full-scale run is due once the pair rounds are over
    cross_started: bool = False
    cut_asked: float = 0.0  # the cut the check was given; config.cut is wider where the fleet's spread is
    widened: dict[str, str] = field(default_factory=dict)  # what had its cut widened ("node", "network") -> why
    racks: RackBook = field(default_factory=RackBook)  # the NVL72 racks (racks.py)

    def in_state(self, *states: NodeStage) -> list[str]:
        """Nodes in any of `states`, in the caller's order."""
        return [n for n in self.order if self.nodes[n].state in states]


def new_fleet(nodes: Sequence[str], config: FleetConfig | None = None, expect: Expect | None = None,
              groups: dict[str, str] | None = None, racks: RackSpec | None = None) -> FleetKnowledge:
    """A fresh state for `nodes` (hostnames, unique). `groups` maps node -> switch when the cluster says
    (Slurm topology, Kubernetes node labels); leave it None for random pairing. `expect` gives the SKU's
    busbw expectation per (collective, node count), or None: then everything is judged against peers only.
    `racks`: the NVL72 racks the site names, the trays a domain holds and the rack band (racks_book.RackSpec);
    without it, racks are the NVLink domains the trays' node tests read."""
    order = tuple(nodes)
    if len(set(order)) != len(order):
        raise UsageError("fleet check: a node is listed twice")
    if not order:
        raise UsageError("fleet check: no nodes to check")
    cfg = config or FleetConfig()
    book = RackBook(spec=racks or RackSpec())
    return FleetKnowledge(cfg, order, dict(groups or {}), expect, {n: NodeHistory(n) for n in order}, cut_asked=cfg.cut,
                          racks=book)
