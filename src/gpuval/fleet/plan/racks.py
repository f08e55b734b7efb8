"""NVL72 racks as failure domains in the fleet check (docs/nvl72.md, "Fleet checks of racks"): the planner's rules
for trays, beside its rules for nodes behind switches.

- **Placing.** A tray belongs to the rack the site names (a node label, a Slurm topology/block block), else to the
  NVLink domain its node test read (`ClusterUUID.CliqueId`, from its fabric check's record). In a rack the site
  names, a tray whose domain is not the one most of its rack's trays share is convicted (NVL_DOMAIN: registered in
  another NVLink partition, or mislabelled); a rack with more trays than a domain holds fails, one with fewer warns.
- **One all_reduce per rack**, once its trays' node tests are in (at most `rack_late` still waiting: they join
  later), over the trays that passed them, instead of their screening pairs: NVLink is tested where it is, inside
  the domain, before anything is blamed on the network between racks. A pass clears every tray in it (their
  network is then judged with everyone else's: cross-switch pairs and the full-scale run).
- **Inside a rack whose all_reduce failed** (or was not sure), its trays are paired with each other, all pairs in
  one round (bisection down to pairs at once: halving 18 trays takes four rounds, the pairs one); a tray of a
  failing pair is a suspect, re-tested with known-good trays of its own rack (over NVLink, never over the network
  between racks) and convicted by the planner's usual rule: two known-good partners. The pairs are judged against
  the other pairs of their own rack (no assumption that two trays' busbw is a full rack's), so a tray stands out
  where it is the fault; no tray standing out after a failed all_reduce (every pair alike, slow or not) is the
  rack's NVLink domain or its full size: one finding, no tray convicted. With too few pairs to compare, every pair
  failing against the racks is the same finding.
- **After a reboot.** A node test failing NVLink, the fabric or IMEX within `settle_s` of the node's boot runs again
  `settle_s` after the boot (links train after every boot: 214 of 288 GB200 nodes raised NVLink down on planned
  reboots, in whole racks, and none had a fault: NVIDIA/NVSentinel#1715); only a failure after that counts.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Callable, Mapping

from gpuval.results.model import Status
from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.knowledge import FleetKnowledge, NodeStage
from gpuval.fleet.plan.pairing import random_pairs
from gpuval.fleet.plan.racks_book import Rack, RackStage
from gpuval.fleet.plan.racks_judge import MIN_PEERS, weigh_rack
from gpuval.fleet.plan.terms import Evidence, Standing, Test, TestResult
from gpuval.fleet.plan.weighing import clears

# The failed checks a node's boot explains: its links still training (nvlink), its GPUs not yet registered in the
# fabric, IMEX not yet up (NVIDIA/NVSentinel#1715; peers-4 A.3). Any other failed check convicts as it always does.
AFTER_BOOT_CODES = frozenset({"NVLINK_DOWN", "FABRIC_NOT_READY", "IMEX_NOT_READY"})
MARGIN = 2.0  # standard errors to spare, as planner.MARGIN

Add = Callable[..., None]  # planner._Builder.add(kind, nodes, samples, purpose)
Free = Callable[..., bool]  # planner._Builder.free(*nodes)


def held(state: FleetKnowledge, node: str) -> bool:
    """Whether a node's tests are the racks' to plan now (a tray of a rack being tested, not yet cleared)."""
    rack = state.racks.rack(node)
    return rack is not None and rack.stage not in (RackStage.NOT_JUDGED, RackStage.NOT_RUN) and \
        state.nodes[node].state is not NodeStage.CLEARED


def in_failed_rack(state: FleetKnowledge, node: str) -> bool:
    """Whether a node is a tray of a rack found bad as a whole (left out of the full-scale run)."""
    rack = state.racks.rack(node)
    return rack is not None and rack.stage is RackStage.FAILED


# ---- placing trays ------------------------------------------------------------------------------------------------


def place(state: FleetKnowledge) -> None:
    """Put every node the site names a rack for, or whose node test read a domain, into its rack (once), and
    convict a tray whose domain is not the one most of its (site-named) rack share."""
    book = state.racks
    for node in state.order:
        if node in book.of:
            continue
        name = book.spec.given.get(node) or book.domains.get(node)
        if name:
            book.of[node] = name
            book.racks.setdefault(name, Rack(name, [])).trays.append(node)
    for rack in book.racks.values():
        _consistency(state, rack)


def _consistency(state: FleetKnowledge, rack: Rack) -> None:
    book, want = state.racks, state.racks.spec.trays
    known = {t: d for t in rack.trays if (d := book.domains.get(t))}
    counts: dict[str, int] = {}
    for domain in known.values():
        counts[domain] = counts.get(domain, 0) + 1
    top = max(counts, key=lambda d: counts[d], default=None)
    if top is not None and 2 * counts[top] > len(known) and len(known) >= 3:
        rack.domain = top
        for tray, domain in known.items():
            rec = state.nodes[tray]
            if domain != top and tray not in book.misplaced and rec.state is not NodeStage.FAILED:
                book.misplaced[tray] = (f"its GPUs are in NVLink domain {domain}, the other {counts[top]} trays of "
                                        f"rack {rack.name} in {top}: registered in another NVLink partition, or the "
                                        f"rack is named wrong ({book.spec.source or 'their domains'})")
                rec.state, rec.cause, rec.reason = NodeStage.FAILED, Cause.NVL_DOMAIN, book.misplaced[tray]
    if want and len(rack.trays) != want:
        status = Status.FAIL if len(rack.trays) > want else Status.WARN
        what = "more than" if status is Status.FAIL else "fewer than"
        rack.size = Standing(status, Cause.RACK if status is Status.FAIL else Cause.NOT_JUDGED,
                             f"{len(rack.trays)} trays in it, {what} the {want} of an NVLink domain of this SKU"
                             + (": two partitions share one domain name" if status is Status.FAIL else
                                ": a tray is out of this check, unavailable, or registered elsewhere"))
    else:
        rack.size = None


# ---- planning -----------------------------------------------------------------------------------------------------


def rack_work(state: FleetKnowledge, add: Add, free: Free, rng: random.Random, deciding: Callable[[str], int]) -> None:
    """This round's rack tests: each waiting rack's all_reduce; inside racks whose all_reduce failed (and late
    trays of racks that passed), trays with known-good trays of their rack (`deciding`: a suspect's samples, the
    planner's rule for one collective), or with each other."""
    wanted = [max(0, MIN_PEERS - len(state.racks.good_pairs))]  # known-good pairs still to make, fleet-wide
    for name in sorted(state.racks.racks):
        rack = state.racks.racks[name]
        if rack.stage is RackStage.WAITING:
            _all_reduce(state, rack, add)
        elif rack.stage in (RackStage.SPLIT, RackStage.PASSED):
            _inside(state, rack, add, free, rng, deciding, wanted)


def _all_reduce(state: FleetKnowledge, rack: Rack, add: Add) -> None:
    nodes = state.nodes
    ready = [t for t in rack.trays if nodes[t].state is NodeStage.READY]
    waiting = sum(nodes[t].state is NodeStage.NEW for t in rack.trays)
    if len(ready) >= 2 and waiting <= state.config.rack_late:
        add("group", tuple(ready), rack_samples(state, 0.5), "rack")


def _inside(state: FleetKnowledge, rack: Rack, add: Add, free: Free, rng: random.Random,
            deciding: Callable[[str], int], wanted: list[int]) -> None:
    """Tests of two trays of a rack: in a rack whose all_reduce failed, first its trays with each other (the pairs
    each is judged against: racks_judge.reference); then suspects, and trays that joined a rack late, each with a
    known-good tray of the rack it has not had; and, while the fleet has fewer than MIN_PEERS of them (`wanted`), two
    known-good trays of a passed rack together, which late trays are judged against."""
    nodes = state.nodes
    cleared = [t for t in rack.trays if nodes[t].state is NodeStage.CLEARED and free(t)]
    rng.shuffle(cleared)
    todo = [t for t in rack.trays if free(t) and nodes[t].state in (NodeStage.SUSPECT, NodeStage.READY)]
    if rack.stage is RackStage.SPLIT and len(rack.pair_means) < MIN_PEERS:
        for pair in random_pairs([t for t in todo if nodes[t].state is NodeStage.READY], rng)[0]:
            add("group", pair, rack_samples(state, 0.0), "rack-pair")
        return
    todo.sort(key=lambda t: nodes[t].state is not NodeStage.SUSPECT)  # suspects take the partners first
    alone = []
    for tray in todo:
        partner = next((c for c in cleared if c not in nodes[tray].partners), None)
        if partner is None:
            alone.append(tray)
            continue
        cleared.remove(partner)
        samples = deciding(tray) if nodes[tray].state is NodeStage.SUSPECT else rack_samples(state, 0.5)
        add("group", (tray, partner), samples, "rack-retest")
    if todo and rack.stage is RackStage.PASSED and wanted[0] > 0 and len(cleared) >= 2:
        wanted[0] -= 1
        add("group", (cleared.pop(), cleared.pop()), rack_samples(state, 0.0), "rack-pair")
    for pair in random_pairs([t for t in alone if nodes[t].state is NodeStage.READY], rng)[0]:
        add("group", pair, rack_samples(state, 0.0), "rack-pair")


def rack_samples(state: FleetKnowledge, off_centre: float) -> int:
    """Samples of a rack test (one collective): what the fleet's noise needs for a tray `off_centre` of the way to
    the cut to pass with MARGIN standard errors to spare (as planner.pair_samples); at least the re-test's."""
    cfg = state.config
    return state.calibration.samples_for((1.0 - off_centre) * cfg.cut / (cfg.clear_z + MARGIN), 1,
                                         cfg.retest_samples, cfg.max_samples)


def settle_wait(state: FleetKnowledge, node: str) -> float:
    """Seconds a node test re-run after a reboot waits, so that it runs `settle_s` after the node's boot (only the
    run right after the one that found NVLink down: one that could not run since has waited already)."""
    rec = state.nodes[node]
    if not rec.evidence or rec.evidence[-1].cause is not Cause.AFTER_REBOOT:
        return 0.0
    return max(0.0, state.config.settle_s - state.racks.uptime.get(node, 0.0))


# ---- taking results in --------------------------------------------------------------------------------------------


def calibrate(state: FleetKnowledge, pairs: list[tuple[Test, TestResult]]) -> None:
    """Add this round's clean rack figures to the racks' references (racks_judge.reference), before weighing."""
    book = state.racks
    for test, result in pairs:
        samples = [x for s in result.busbw.values() for x in s]
        if test.purpose not in ("rack", "rack-pair") or result.error or result.not_run or not samples:
            continue
        if result.nvlink is not None and result.nvlink.fell_back:
            continue
        mean = sum(samples) / len(samples)
        rack = book.rack(test.nodes[0])
        if test.purpose == "rack":
            book.rack_means.append(mean)
        elif all(state.nodes[n].state is NodeStage.CLEARED for n in test.nodes):
            book.good_pairs.append(mean)  # two known-good trays (of a rack that passed): the late trays' reference
        elif rack is not None:
            rack.pair_means.append(mean)


def note_node(state: FleetKnowledge, node: str, result: TestResult) -> None:
    """What a node test says of the node's NVLink: its domain, its uptime, and whether a re-run after the settle
    time found it up."""
    book = state.racks
    if result.not_run:
        return
    if result.domain is not None or node not in book.domains:
        book.domains[node] = result.domain
    if result.uptime_s is not None:
        book.uptime[node] = result.uptime_s
    if node in book.settling and node not in book.settled and not result.error and result.health in (
            Status.PASS, Status.WARN):
        book.settled[node] = "NVLink up after the settle time"


def settles(state: FleetKnowledge, node: str, ev: Evidence, result: TestResult) -> bool:
    """Whether a node test's health failure is NVLink, the fabric or IMEX right after the node's boot: then the
    evidence is kept (cause AFTER_REBOOT), the node runs its test again `settle_s` after its boot, and nothing is
    convicted now. Once per node: a failure after the settle time counts."""
    book, cfg = state.racks, state.config
    codes = set(result.health_codes)
    up = result.uptime_s
    if ev.cause is not Cause.HEALTH_FAILED or node in book.settling or not codes or not codes <= AFTER_BOOT_CODES:
        return False
    if up is None or not 0 <= up < cfg.settle_s:
        return False
    book.settling[node] = (f"{', '.join(sorted(codes))} {up:.0f} s after its boot: runs again "
                           f"{cfg.settle_s:.0f} s after the boot (NVIDIA/NVSentinel#1715)")
    state.nodes[node].evidence.append(replace(ev, status=Status.WARN, cause=Cause.AFTER_REBOOT,
                                              reason=f"{ev.reason}; {book.settling[node]}"))
    return True


def take_rack_test(state: FleetKnowledge, test: Test, result: TestResult, index: int,
                   before: Mapping[str, NodeStage], pair_for_node: Callable[..., Any]) -> Evidence:
    """One rack test weighed and taken in: a rack's all_reduce moves the rack on; a test of two trays moves each
    tray as a pair test does (`pair_for_node`: rounds' rule, suspects settled with the rest)."""
    ev = weigh_rack(state, test, result, index)
    rack = state.racks.rack(test.nodes[0])
    if rack is None:
        raise ValueError(f"{test.id}: a rack test of nodes in no rack")
    rack.evidence.append(ev)
    for node in test.nodes:
        state.nodes[node].evidence.append(ev)
    if test.purpose == "rack":
        _rack_result(state, rack, ev)
        return ev
    if test.purpose == "rack-pair" and rack.split_round is None:
        rack.split_round = index
    for node in test.nodes:
        rec = state.nodes[node]
        others = [n for n in test.nodes if n != node]
        rec.partners.update(others)
        pair_for_node(state, rec, ev, all(before[o] is NodeStage.CLEARED for o in others), others)
    return ev


def _rack_result(state: FleetKnowledge, rack: Rack, ev: Evidence) -> None:
    nodes = state.nodes
    if ev.status is Status.ERROR:
        rack.not_run += 1
        if rack.not_run >= state.config.max_not_run:
            rack.stage = RackStage.NOT_RUN
            rack.standing = Standing(Status.ERROR, Cause.COULD_NOT_RUN, f"its all_reduce could not run "
                                     f"{rack.not_run} times: {ev.reason}")
            for tray in ev.test.nodes:
                rec = nodes[tray]
                rec.state, rec.cause, rec.reason = NodeStage.NOT_RUN, Cause.COULD_NOT_RUN, rack.standing.reason
        return
    if ev.cause is Cause.FELL_BACK:
        rack.stage, rack.standing = RackStage.FAILED, Standing(Status.FAIL, Cause.FELL_BACK, ev.reason)
    elif ev.status is Status.PASS:
        rack.stage, rack.standing = RackStage.PASSED, Standing(Status.PASS, Cause.MEASURED,
                                                               f"its all_reduce passes: {ev.reason}")
        for tray in ev.test.nodes:
            rec = nodes[tray]
            rec.state, rec.cause = NodeStage.CLEARED, Cause.MEASURED
            rec.reason = f"passes in rack {rack.name}'s all_reduce ({ev.test.id})"
    elif ev.status is Status.SKIPPED:
        rack.stage, rack.standing = RackStage.NOT_JUDGED, Standing(Status.SKIPPED, ev.cause, ev.reason)
    else:
        rack.stage = RackStage.SPLIT


def settle(state: FleetKnowledge) -> None:
    """Decide each rack whose trays were paired inside it: every pair failing (no tray cleared) is the rack's NVLink
    domain; every tray passing after a failed all_reduce is a rack slow only at its full size."""
    nodes = state.nodes
    for rack in state.racks.racks.values():
        if rack.stage is not RackStage.SPLIT or rack.split_round is None:
            continue
        inside = [e for e in rack.evidence if e.test.purpose != "rack" and e.status is not Status.ERROR]
        bad = [e for e in inside if not clears(e, state.config.cut)]
        cleared = [t for t in rack.trays if nodes[t].state is NodeStage.CLEARED]
        first = next(e for e in rack.evidence if e.test.purpose == "rack" and e.status is not Status.ERROR)
        if not cleared and len(bad) >= 2 and len(bad) == len(inside):
            rack.stage = RackStage.FAILED
            rack.standing = Standing(Status.FAIL, Cause.RACK, f"its all_reduce fails ({first.reason}) and so does "
                                     f"every pair of its trays ({len(bad)} of {len(inside)}): the rack's NVLink "
                                     "domain (its NVLink switch trays, NVLS), not one tray")
        elif inside and not bad and not any(nodes[t].state in (NodeStage.SUSPECT, NodeStage.READY)
                                            for t in rack.trays):
            if first.status is Status.FAIL:
                rack.stage = RackStage.FAILED
                rack.standing = Standing(Status.FAIL, Cause.RACK, f"its all_reduce fails ({first.reason}) and no "
                                         f"tray stands out among the {len(inside)} pairs of its trays: the rack's "
                                         "NVLink domain (its NVLink switch trays, NVLS), or a fault of its full "
                                         "size only, not one tray")
            else:
                rack.stage = RackStage.PASSED
                rack.standing = Standing(Status.PASS, Cause.MEASURED, f"its all_reduce was not sure "
                                         f"({first.reason}); every pair of its trays passes")
