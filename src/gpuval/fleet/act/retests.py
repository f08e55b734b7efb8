"""Re-testing nodes with known-good partners: one re-test behind two commands, each the fleet check's rounds (run/request.py,
with its rules: a node suite run twice before a verdict, a node convicted after failing with known-good partners) on
exactly the nodes under re-test and their partners, whose verdict alone decides.

- `retest_suspects` (`gpuval jobs diagnose --retest`): the nodes a job's diagnosis nominated, in service, with the
  check's settings as asked (no full-scale run: it would test the partners, not the suspects). A suspect that fails
  is taken out and its evidence kept (FleetRun.conclude, through operate.act: so `retest_held` can lift it later),
  its drain reason naming the diagnosis's run id (its records name the job); a partner that fails is reported, never
  drained: no job nominated it (a fleet check with --drain decides on it).
- `retest_links` (`gpuval jobs diagnose --retest --links`): a communication slowdown names no node, so the nodes the
  job's links join are all under re-test, by `retest_suspects`, with partners from outside the job only; the node
  whose link is slow fails with its partners and is taken out as any failed suspect, and a pair of the job's nodes
  that fails while both its ends pass is the link itself: named, no node taken out for it.
- `retest_held` (`gpuval fleet retest`): return to service that proves it, for the nodes gpuval holds with a fleet
  code (FLEET_*). No health check re-checks a fleet code (a claim about a node's figures or crashes among its
  peers), so the drain is lifted only by a re-test of what convicted it: the held nodes (operate.held's census, or
  those of --nodelist among them) with the settings the conviction's evidence bundle kept (fleet/act/grounds.py:
  sizes, iterations, ranks, backend, SKU, image, samples, the cut; one check per distinct settings), every pair test
  at the re-test's sample count, through the Site's re-test window (Slurm: a reservation; Kubernetes: pods that
  tolerate gpuval's taint), so no one else's job lands on an unproven node. A held node that passes is lifted through
  operate.node_state (it re-reads the node and lifts only gpuval's own drain, only if every code it stands for is a
  fleet code, re-checked by this run); anything else (a fail, could not run, undecided, no bundle or one that cannot
  be read: that node alone) keeps the drain, and the action says why; a node lifted into another re-test's window
  (Slurm) is left to that re-test. A person's drain is no census entry of gpuval's: never touched.

One request (`RetestRequest`, checked before anything runs by `check_request`), one choice of partners
(`choose_partners`: the named ones, else idle nodes outside the nodes under re-test and the job, else the job's own
other nodes, whose tests queue until the job has let go of them), one summary (`Retests`).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal

from gpuval.diagnosis.job_diagnosis import Retest, RetestLink, RetestNode
from gpuval.engines import get_engine
from gpuval.engines.nodes import NodeClient
from gpuval.engines.site import Site
from gpuval.errors import GpuvalError, UsageError
from gpuval.fleet.run.request import CheckRequest, prepare, validate_settings
from gpuval.fleet.plan.expect import TestSizes
from gpuval.fleet.plan.terms import FleetConfig
from gpuval.fleet.run.outcome import FleetOutcome, RoundLog
from gpuval.fleet.act.windows import recorded_window, recover
from gpuval.operate.codes import FLEET_CODES, Acted, FleetFault
from gpuval.operate.evidence import retest_settings
from gpuval.operate.held import Held, held_nodes
from gpuval.operate.node_state import NodeAction, apply
from gpuval.results.model import Status, worst_status
from gpuval.results.verdict import exit_code_of

SUSPECT_PARTNERS = 2  # two known-good partners convict a suspect's pair test
HELD_PARTNERS = 3  # two convict; a third pairs with the second, so the partners are cleared too
Role = Literal["suspect", "held", "partner"]


@dataclass(kw_only=True)
class RetestRequest:
    """What a re-test was asked, by either command (given by keyword). `partners` and `nodelist` as the user wrote
    them (a Slurm host list, node names), expanded once by the engine's site; a job's `suspects` and `job_nodes` as
    its diagnosis named them. The check's own settings (`sku` ... `max_samples`) are a suspect re-test's; a held
    node's re-test takes those its bundle kept."""

    on: str
    run_id: str  # a suspect re-test's is the diagnosis's: its drains and records name the job
    options: dict[str, Any] = field(default_factory=dict)
    partners: str | None = None  # known-good partners [default: chosen, `choose_partners`]
    nodelist: str | None = None  # held: which of the nodes gpuval holds [default: every one with a fleet code]
    job_id: str = ""  # suspects: the job whose diagnosis nominated them
    job_nodes: list[str] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)
    sku: str | None = None
    baselines: tuple[Path, ...] = ()
    size: int | None = None
    cut: float = FleetConfig.cut
    max_samples: int = FleetConfig.max_samples
    env: dict[str, str] = field(default_factory=dict)
    queue_timeout_s: float = 3600.0
    poll_s: float = 10.0
    drain: bool = True  # suspects that fail are taken out (--no-drain: reported only)
    results: Path | None = None
    evidence_dir: Path | None = None  # where the convictions' bundles are [default: the state directory]


def check_request(req: RetestRequest) -> None:
    """Every bad value of `req` as a one-line error, before anything runs or is asked of the engine beyond its
    options: the run id, the cut, the size, the engine and its options, the node lists (within the site's caps), a
    suspect named as a partner. `req.suspects` may still be empty (a diagnosis fills it)."""
    _where(req)


@dataclass(frozen=True)
class _Where:
    site: Site
    partners: list[str]  # named ones, expanded ([]: chosen)
    held: list[str] | None  # --nodelist expanded (None: every held node)


def _where(req: RetestRequest, site: Site | None = None) -> _Where:
    validate_settings(req.run_id, req.size, req.cut)  # the fleet check's own rule for them
    if req.nodelist is not None and req.suspects:
        raise UsageError("a re-test is of a job's suspects or of the nodes gpuval holds, not both")
    site = site or get_engine(req.on, req.options).site(req.sku)
    partners = site.expand(req.partners) if req.partners else []
    clash = sorted(set(partners) & set(req.suspects))
    if clash:
        raise UsageError(f"--partners {', '.join(clash)}: a suspect cannot be its own known-good partner")
    return _Where(site, partners, site.expand(req.nodelist) if req.nodelist else None)


def choose_partners(site: Site, named: list[str], under_test: list[str], job_id: str, job_nodes: list[str],
                    count: int) -> tuple[list[str], str]:
    """(the partners, how they were chosen): the `named` ones (less any node under re-test), else up to `count` idle
    nodes outside the nodes under re-test and the job, else the job's own other nodes (their tests queue until the
    job has ended); none at all is a one-line error."""
    if named:
        kept = [n for n in named if n not in under_test]
        if kept:
            return kept, "named with --partners"
    else:
        idle = idle_outside(site, [*under_test, *job_nodes], count)
        if idle:
            return idle, "idle nodes outside the job" if job_id else "idle nodes the engine offers"
        own = [n for n in job_nodes if n not in under_test][:count]
        if own:
            return own, "the job's own nodes: their tests wait until the job has ended"
    job = f" and no other node in job {job_id}" if job_id else ""
    raise UsageError(f"no known-good partner for {', '.join(under_test)}: no {'named ' if named else 'idle '}node "
                     f"in service{job}; name one with --partners")


def idle_outside(site: Site, busy: list[str], count: int) -> list[str]:
    """Up to `count` idle nodes outside `busy`. A site picks an exact count or refuses, and may offer busy nodes (a
    drained Slurm node can be idle; a Kubernetes node a pod runs on is still schedulable): asked for room for those
    too, then for one node fewer each time it refuses, so the idle nodes there are are found whatever their number."""
    for asked in range(count + len(busy), 0, -1):
        try:
            return [n for n in site.pick(asked) if n not in busy][:count]
        except GpuvalError:
            continue
    return []


@dataclass(frozen=True)
class Retested:
    """One node of a re-test: its role, the fleet's verdict on it and why, and what was done to it."""

    role: Role
    status: Status
    reason: str
    action: NodeAction

    @property
    def node(self) -> str:
        return self.action.node

    @property
    def standing(self) -> Status:
        """What it says of the re-test's end: a suspect its verdict; a held node PASS once lifted, FAIL when it
        failed its re-test, else ERROR (not re-tested, not lifted: a person looks)."""
        if self.role != "held":
            return self.status
        return Status.PASS if self.action.action.lifted else Status.FAIL if self.status is Status.FAIL \
            else Status.ERROR


@dataclass
class Retests:
    """The end of a re-test: its run, its partners and how they were chosen, the checks it ran (one per distinct
    set of settings), and each node's row (those under re-test, then the partners)."""

    run_id: str
    partners: list[str] = field(default_factory=list)
    how: str = ""
    outcomes: list[FleetOutcome] = field(default_factory=list)
    nodes: list[Retested] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what it did beyond its checks (a stopped re-test's window closed)
    links: bool = False  # a job's links were under re-test (retest_links)

    @property
    def under_test(self) -> list[Retested]:
        return [r for r in self.nodes if r.role != "partner"]

    @property
    def status(self) -> Status:
        """The worst standing of the nodes under re-test (PASS when none was: nothing held to re-test)."""
        return worst_status([r.standing for r in self.under_test]) if self.under_test else Status.PASS

    @property
    def exit_code(self) -> int:
        """results.verdict.exit_code_of the status: 0 every node passed (and, held, was lifted), 1 one failed its
        re-test, 2 one was not re-tested, not judged or not lifted for another reason."""
        return exit_code_of(self.status)

    @property
    def actions(self) -> list[NodeAction]:
        """What was done to each node under re-test."""
        return [r.action for r in self.under_test]

    def to_json(self) -> dict[str, Any]:
        """`gpuval fleet retest --json`: the actions and every check's verdicts."""
        return {"run_id": self.run_id, "actions": [a.to_json() for a in self.actions],
                "checks": [o.to_json() for o in self.outcomes], "notes": self.notes}

    def failed_links(self) -> list[RetestLink]:
        """The links of a node under re-test that failed while neither end did (the fleet's link verdicts: a link
        a failed node explains is not one of them)."""
        mine = {r.node for r in self.under_test}
        return [RetestLink(v.subject, v.status, v.reason) for o in self.outcomes for v in o.verdicts.links.values()
                if v.status is Status.FAIL and mine & set(v.members)]

    def for_diagnosis(self, job_id: str) -> Retest:
        """The re-test as a job's diagnosis reports it (diagnosis.job_diagnosis.Retest): its words, at that edge."""
        suspects = [r for r in self.nodes if r.role == "suspect"]
        failed, links = [r.node for r in suspects if r.status is Status.FAIL], self.failed_links()
        shown = ", ".join(f"{r.node} {r.status.value}" for r in suspects)
        named = [*failed, *(f"link {k.link} (both its ends pass)" for k in links)]
        reason = f"re-test failed {', '.join(named)}" if named else f"no suspect failed its re-test ({shown})"
        notes = [f"partners: {', '.join(self.partners)} ({self.how})", *(n for o in self.outcomes
                                                                          for n in o.verdicts.notes)]
        rows = [RetestNode(r.node, "suspect" if r.role == "suspect" else "partner", r.status, r.reason,
                           r.action.action.value, r.action.detail) for r in self.nodes]
        rounds = sum(o.verdicts.rounds for o in self.outcomes)
        status = worst_status([r.status for r in suspects] + [k.status for k in links]) if suspects else Status.ERROR
        return Retest(self.run_id, status, reason, rows, rounds, notes, links, self.links)


def _check(req: RetestRequest, where: _Where, nodes: list[str], partners: list[str], check: CheckRequest,
           on_round: Callable[[RoundLog], None], held: list[Held] | None = None,
           sizes: TestSizes | None = None) -> FleetOutcome:
    """One fleet check of `nodes` and their `partners` on the request's site: for held nodes inside the re-test
    window (their tests' own sizes, `sizes`, as convicted); concluded with the suspects taken out (`req.drain`)."""
    run = prepare(replace(check, nodelist=",".join(dict.fromkeys([*nodes, *partners]))), on_round, where.site)
    run.evidence_dir = req.evidence_dir
    if sizes is not None:
        run.settings = replace(run.settings, sizes=sizes)  # both sizes as convicted (--size set only the multi one)
    window = recorded_window(where.site, {h.node: h.why for h in held}, partners, req.run_id, _state(req)) \
        if held is not None else nullcontext()
    with window:
        outcome = run.check(run.nodes, run.site.groups(run.nodes), run.site.racks(run.nodes))
    return run.conclude(outcome, held is None and req.drain, only=nodes)


def retest_suspects(req: RetestRequest, on_round: Callable[[RoundLog], None] = lambda _log: None,
                    site: Site | None = None) -> Retests:
    """Re-test a job's suspects with known-good partners, take out each suspect that fails (`req.drain`), store
    every record under the run id (see the module's docstring). `site`: the engine's site [default: made from the
    request]."""
    if not req.suspects:
        raise UsageError(f"--retest: job {req.job_id}'s diagnosis nominates no node: nothing to re-test")
    where = _where(req, site)
    partners, how = choose_partners(where.site, where.partners, req.suspects, req.job_id, req.job_nodes,
                                    SUSPECT_PARTNERS)
    check = CheckRequest(on=req.on, run_id=req.run_id, sku=req.sku, baselines=req.baselines, options=req.options,
                         size=req.size, queue_timeout_s=req.queue_timeout_s, poll_s=req.poll_s, env=req.env,
                         config=FleetConfig(cut=req.cut, max_scale_runs=0, max_samples=req.max_samples),
                         results=req.results)
    outcome = _check(req, where, req.suspects, partners, check, on_round)
    done = Retests(req.run_id, partners, how, [outcome])
    acted = {a.node: a for a in outcome.actions}
    for node, verdict in outcome.verdicts.nodes.items():
        role: Role = "suspect" if node in req.suspects else "partner"
        action = acted.get(node) or _left(where.site, node, verdict.status, role, req)
        done.nodes.append(Retested(role, verdict.status, verdict.reason, action))
    return done


def retest_links(req: RetestRequest, on_round: Callable[[RoundLog], None] = lambda _log: None,
                 site: Site | None = None) -> Retests:
    """Re-test a job's links (see the module's docstring): `req.suspects`, the nodes they join, and every other node
    of the job (`req.job_nodes`: none of them is a known-good partner), each under re-test with partners from
    outside the job, through the one re-test of suspects."""
    if not req.suspects:
        raise UsageError(f"--retest --links: job {req.job_id}'s diagnosis names none of its links: nothing to "
                         "re-test")
    nodes = list(dict.fromkeys([*req.suspects, *req.job_nodes]))
    done = retest_suspects(replace(req, job_nodes=nodes, suspects=nodes), on_round, site)
    done.links = True
    return done


def _left(site: Site, node: str, status: Status, role: Role, req: RetestRequest) -> NodeAction:
    """What a suspect re-test did not do to a node, and why."""
    if status is Status.FAIL and role == "partner":
        return NodeAction(site.engine.name, node, status, Acted.NOT_DRAINED, f"failed as a partner; job {req.job_id} "
                          f"did not nominate it (`gpuval fleet check --nodelist {node} --drain` decides)")
    if status is Status.FAIL:
        return NodeAction(site.engine.name, node, status, Acted.NOT_DRAINED, "the re-test ran without draining")
    return NodeAction(site.engine.name, node, status, Acted.UNCHANGED, "")


def retest_held(req: RetestRequest, on_round: Callable[[RoundLog], None] = lambda _log: None,
                site: Site | None = None) -> Retests:
    """Re-test the nodes gpuval holds with a fleet code and lift each one that passes (see the module's
    docstring); `site`: the engine's site [default: made from the request]."""
    where = _where(req, site)
    client = where.site.engine.node_client()
    done = Retests(req.run_id, notes=recover(where.site, _state(req)))  # a stopped re-test's nodes held again first
    held = [h for h in held_nodes(client) if h.by_fleet and (where.held is None or h.node in where.held)]
    for node in [n for n in where.held or [] if n not in {h.node for h in held}]:
        done.nodes.append(_skipped(client, node, Acted.UNCHANGED, "gpuval holds it with no fleet code (FLEET_*): "
                                   "left as it is"))
    groups = _by_settings(client, _state(req), held, done.nodes)
    if groups:
        done.partners, done.how = choose_partners(where.site, where.partners, [h.node for h in held], "", [],
                                                  HELD_PARTNERS)
    for key, nodes in groups.items():
        settings = json.loads(key)
        outcome = _check(req, where, [h.node for h in nodes], done.partners, _held_check(req, settings), on_round,
                         nodes, TestSizes(**settings["sizes"]))
        done.outcomes.append(outcome)
        done.nodes += [_decide(client, h, outcome, req.run_id) for h in nodes]
    return done


def _by_settings(client: NodeClient, state: Path, held: list[Held], left: list[Retested]) -> dict[str, list[Held]]:
    """The held nodes this re-test takes, grouped by the settings their bundles under `state` kept (JSON: one check
    a group); a row in `left` for each node it leaves as it is, with why."""
    groups: dict[str, list[Held]] = {}
    for h in held:
        try:
            found = None if h.window else retest_settings(state, h.node, h.run_id or None)
        except GpuvalError as exc:  # one bad bundle keeps its node, not the others, from their re-test
            why = " ".join(str(exc).splitlines())
            left.append(_skipped(client, h.node, Acted.KEPT, f"its evidence bundle cannot be read here ({why}): a "
                                 "person lifts it"))
            continue
        if h.window:  # what recover() left open is another re-test's: running, or stopped on another host
            left.append(_skipped(client, h.node, Acted.KEPT, f"in re-test window {h.window} of another `gpuval fleet "
                                 "retest` (running now, or stopped where it ran: the next one there closes it): left "
                                 "to it"))
        elif found is None:
            left.append(_skipped(client, h.node, Acted.KEPT, "no evidence bundle of its conviction here names the "
                                 "tests that convicted it: a person lifts it"))
        else:
            groups.setdefault(json.dumps(found[1], sort_keys=True), []).append(h)
    return groups


def _skipped(client: NodeClient, node: str, action: Acted, why: str) -> Retested:
    """A held node this re-test leaves as it is, and why."""
    return Retested("held", Status.SKIPPED, "", NodeAction(client.scheduler, node, Status.SKIPPED, action, why))


def _state(req: RetestRequest) -> Path:
    """Where the convictions' bundles and the re-test windows' records are: the state directory [default]."""
    from gpuval.workloads.health.last_full import state_dir

    return req.evidence_dir or state_dir()


def _held_check(req: RetestRequest, settings: dict[str, Any]) -> CheckRequest:
    """The fleet check that repeats a conviction: its bundle's settings, every pair test at the re-test's samples."""
    suite, _screen, again = (int(s) for s in settings.get("samples") or (8, 4, 8))
    return CheckRequest(
        on=req.on, run_id=req.run_id, sku=settings.get("sku"),
        baselines=tuple(Path(p) for p in settings.get("baselines") or ()), options=req.options,
        size=TestSizes(**settings["sizes"]).multi, samples=(suite, again, again), iters=settings.get("iters"),
        warmup=settings.get("warmup"), backend=settings.get("backend") or "auto",
        timeout_s=float(settings.get("timeout_s") or 900.0), queue_timeout_s=req.queue_timeout_s,
        poll_s=req.poll_s, gpus_per_node=settings.get("gpus_per_node"),
        procs_per_node=settings.get("procs_per_node"), node_procs=settings.get("node_procs"),
        image=settings.get("image"), env=req.env, results=req.results,
        config=replace(FleetConfig(), cut=float(settings.get("cut") or FleetConfig.cut),
                       max_samples=int(settings.get("max_samples") or FleetConfig.max_samples)))


def _decide(client: NodeClient, held: Held, outcome: FleetOutcome, run_id: str) -> Retested:
    """Lift the node's drain through the policy when its re-test passed; else say why it stays."""
    verdict = outcome.verdicts.nodes.get(held.node)
    status = verdict.status if verdict else Status.ERROR
    reason = verdict.reason if verdict else "not re-tested"
    if status is not Status.PASS:
        return Retested("held", status, reason, NodeAction(client.scheduler, held.node, status, Acted.KEPT,
                                                           f"its re-test did not pass ({status.value}: {reason})"))
    if FleetFault.FLEET_NODE_SLOW_GPU.value in held.codes and held.node in outcome.verdicts.gpus_not_compared:
        # it passes on its network, but what held it (its GPU figures against the fleet's) was not re-checked
        return Retested("held", status, reason, NodeAction(
            client.scheduler, held.node, status, Acted.KEPT, "its re-test passed, but its GPU figures were not "
            "judged against the fleet (too few nodes of its GPU model among its partners): "
            f"{FleetFault.FLEET_NODE_SLOW_GPU.value} is not re-checked; name partners of its model with --partners"))
    done = apply(Status.PASS, held.node, run_id, [], client, rechecked=FLEET_CODES)
    lifted = Acted.LIFTED if done.action.lifted else Acted.KEPT
    return Retested("held", status, reason, NodeAction(client.scheduler, held.node, Status.PASS, lifted,
                                                       f"its re-test passed: {done.detail}"))
