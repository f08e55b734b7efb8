"""`gpuval fleet retest`: return to service that proves it, for the nodes gpuval holds with fleet codes (FLEET_*).

A fleet code is a claim about a node's figures or crashes among its peers, which no health check on the node
re-checks; so its drain is lifted only by a fleet check that repeats what convicted it: the held nodes (those the
census says gpuval holds with a FLEET_* code, or the ones --nodelist names among them) and known-good partners in
service (--partners, else PARTNERS nodes the engine has free) run the fleet check's rounds with the settings the
conviction's evidence bundle kept (fleet/convictions.py: sizes, iterations, ranks, backend, SKU, image, the cut),
every pair test at the re-test's sample count (never fewer than convicted the node). The held nodes take the tests
through the Site's re-test window (Slurm: a reservation they are lifted into, drained again on the way out; Kubernetes:
pods that tolerate gpuval's taint), so no one else's job lands on an unproven node.

Then, per held node: a PASS is lifted through operate.node_state, which re-reads the node and lifts only gpuval's
own drain, only if every code it stands for is a fleet code (re-checked by this run); anything else (a fail, could
not run, undecided, no bundle) leaves the drain, and the action says why. A person's drain is no census entry of
gpuval's: never touched. Partners are judged, never drained here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from gpuval.engines import get_engine, site_for
from gpuval.engines.nodes import NodeClient
from gpuval.engines.site import Site
from gpuval.errors import UsageError
from gpuval.fleet.check import CheckRequest, prepare
from gpuval.fleet.expect import TestSizes
from gpuval.fleet.model import FleetConfig
from gpuval.fleet.outcome import FleetOutcome, RoundLog
from gpuval.operate.brake import drained_by_gpuval
from gpuval.operate.codes import FLEET_CODES, Acted
from gpuval.operate.evidence import read_conviction
from gpuval.operate.node_state import NodeAction, apply, held_reason
from gpuval.results.model import Status

PARTNERS = 3  # free nodes picked as partners: two known-good partners convict, a third pairs with the second


@dataclass
class ReleaseRequest:
    """What `gpuval fleet retest` was asked."""

    on: str
    run_id: str
    nodelist: str | None = None  # the held nodes to re-test [default: every one gpuval holds with a FLEET_* code]
    partners: str | None = None  # known-good partners in service [default: PARTNERS free nodes]
    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    queue_timeout_s: float = 3600.0
    poll_s: float = 10.0
    results: Path | None = None
    evidence_dir: Path | None = None  # where the convictions' bundles are [default: the state directory]


@dataclass(frozen=True)
class Held:
    """A node gpuval holds with a fleet code: why (as the scheduler says it), its codes, its conviction's run."""

    node: str
    why: str
    codes: tuple[str, ...]
    run_id: str | None


@dataclass
class Retest:
    """The end of a re-test: the checks it ran (one per distinct set of settings) and what was done to each node."""

    run_id: str
    outcomes: list[FleetOutcome]
    actions: list[NodeAction]

    @property
    def exit_code(self) -> int:
        """0: every held node re-tested passed and was lifted; 1: one failed its re-test; 2: one was not re-tested
        or not lifted for another reason (nothing named: 0)."""
        kept = [a for a in self.actions if a.action is not Acted.LIFTED]
        return 0 if not kept else 1 if any(a.verdict is Status.FAIL for a in kept) else 2

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "actions": [a.to_json() for a in self.actions],
                "checks": [o.to_json() for o in self.outcomes]}


def held_by_fleet(client: NodeClient, names: list[str] | None) -> list[Held]:
    """The nodes gpuval holds (the census) with a FLEET_* code, those of `names` only where given."""
    found = []
    for held in drained_by_gpuval(client).held:
        read = held_reason(held.why)
        if any(c in FLEET_CODES for c in read.codes) and (names is None or held.name in names):
            found.append(Held(held.name, held.why, read.codes, read.run_id or None))
    return found


def _action(client: NodeClient, node: str, verdict: Status, action: Acted, detail: str) -> NodeAction:
    return NodeAction(client.scheduler, node, verdict, action, detail)


def retest_held(req: ReleaseRequest, on_round: Callable[[RoundLog], None] = lambda _log: None,
                site: Site | None = None) -> Retest:
    """Re-test the held nodes and lift each one that passes (see the module's docstring); `site`: the engine's site
    [default: made from --on and --opt]."""
    from gpuval.workloads.health.last_full import state_dir

    site = site or site_for(get_engine(req.on, req.options), None, None)
    client = site.node_client()
    names = site.expand(req.nodelist) if req.nodelist else None
    held = held_by_fleet(client, names)
    done = Retest(req.run_id, [], [_action(client, n, Status.SKIPPED, Acted.UNCHANGED, "gpuval holds it with no fleet "
                                           "code (FLEET_*): left as it is") for n in names or []
                                   if n not in {h.node for h in held}])
    groups: dict[str, list[Held]] = {}
    for h in held:
        found = read_conviction(req.evidence_dir or state_dir(), h.node, h.run_id)
        settings = found[1].get("fleet", {}).get("settings") if found else None
        if not isinstance(settings, dict):
            done.actions.append(_action(client, h.node, Status.SKIPPED, Acted.KEPT, "no evidence bundle of its "
                                        "conviction here names the tests that convicted it: a person lifts it"))
            continue
        groups.setdefault(json.dumps(settings, sort_keys=True), []).append(h)
    partners = _partners(site, req.partners, [h.node for h in held])
    for key, nodes in groups.items():
        outcome = _retest(req, json.loads(key), nodes, partners, on_round, site)
        done.outcomes.append(outcome)
        done.actions += [_decide(client, h, outcome, req.run_id) for h in nodes]
    return done


def _partners(site: Site, text: str | None, held: list[str]) -> list[str]:
    if not held:
        return []
    chosen = site.expand(text) if text else site.pick(PARTNERS)
    chosen = [n for n in chosen if n not in held]
    if not chosen:
        raise UsageError("--partners: name at least one node in service that gpuval does not hold")
    return chosen


def _retest(req: ReleaseRequest, settings: dict[str, Any], held: list[Held], partners: list[str],
            on_round: Callable[[RoundLog], None], site: Site) -> FleetOutcome:
    """One fleet check of the held nodes and their partners with the conviction's settings, in the re-test window."""
    suite, _screen, retest = (int(s) for s in settings.get("samples") or (8, 4, 8))
    sizes = TestSizes(**settings["sizes"])
    check = CheckRequest(
        on=req.on, run_id=req.run_id, nodelist=",".join([*(h.node for h in held), *partners]),
        sku=settings.get("sku"), baselines=tuple(Path(p) for p in settings.get("baselines") or ()),
        options=req.options, size=sizes.multi, samples=(suite, retest, retest), iters=settings.get("iters"),
        warmup=settings.get("warmup"), backend=settings.get("backend") or "auto",
        timeout_s=float(settings.get("timeout_s") or 900.0), queue_timeout_s=req.queue_timeout_s, poll_s=req.poll_s,
        gpus_per_node=settings.get("gpus_per_node"), procs_per_node=settings.get("procs_per_node"),
        node_procs=settings.get("node_procs"), image=settings.get("image"), env=req.env, results=req.results,
        config=replace(FleetConfig(), cut=float(settings.get("cut") or FleetConfig.cut),
                       max_samples=int(settings.get("max_samples") or FleetConfig.max_samples)))
    run = prepare(check, on_round, site)
    run.settings = replace(run.settings, sizes=sizes)  # both sizes as convicted (--size set only the multi one)
    with run.site.retest_window({h.node: h.why for h in held}, partners, f"gpuval-retest-{req.run_id}"):
        outcome = run.check(run.nodes, run.site.groups(run.nodes))
    return run.conclude(outcome, drain=False)


def _decide(client: NodeClient, held: Held, outcome: FleetOutcome, run_id: str) -> NodeAction:
    """Lift the node's drain through the policy when its re-test passed; else say why it stays."""
    verdict = outcome.verdicts.nodes.get(held.node)
    if verdict is None or verdict.status is not Status.PASS:
        status = verdict.status if verdict else Status.ERROR
        why = verdict.reason if verdict else "not re-tested"
        return _action(client, held.node, status, Acted.KEPT, f"its re-test did not pass ({status.value}: {why})")
    done = apply(Status.PASS, held.node, run_id, [], client, rechecked=FLEET_CODES)
    return _action(client, held.node, Status.PASS, Acted.LIFTED if done.action.lifted else Acted.KEPT,
                   f"its re-test passed: {done.detail}")
