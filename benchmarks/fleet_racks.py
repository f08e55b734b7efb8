"""NVL72 racks in the simulated fleet: racks of 18 trays beside HGX nodes behind switches, the planner finding a bad
GPU, a bad tray, a bad rack and a rack's bad uplink (docs/nvl72.md, "Fleet checks of racks").

The model (synthetic, seeded; units are GB/s of a made-up SKU, as benchmarks/fleet_isolation.py's, whose model it
extends):
- HGX nodes under leaf switches of 16, as fleet_isolation's; trays in racks of 18, each rack one NVLink domain
  (its trays' node tests read `<cluster uuid>.<clique>`) whose trays hang off one leaf (the rack's uplink);
- a node's in-node all_reduce and its network are fleet_isolation's (trays' network figures are the HGX nodes', a
  simplification: one SKU's figures); a test inside a rack (its all_reduce, two of its trays) runs at the NVLink
  figure x the slowest of the rack's domain and its trays' NVLink, and NCCL's log says MNNVL and NVLS in use;
- planted faults, in the order of KINDS: a GPU (a node's in-node all_reduce 10-30% slow: a throttled GPU, a GPU's
  links down), a tray (its NVLink 8-30% slow, or crashing every test inside its rack), a rack (its NVLink domain
  10-40% slow everywhere), a rack's uplink (its leaf's uplink 5-30% slow), and fleet_isolation's HGX faults (a slow
  or broken node, a switch's uplink);
- every sample = truth x (1 + N(0, noise)); `refuse` of all tests are refused by the engine (could not run).

Scored: found = a planted node FAIL, a planted uplink FAIL, a planted rack given one rack finding (a group verdict
`rack NAME` of cause RACK) with none of its trays FAIL; false positives = healthy nodes FAIL or WARN, healthy
uplinks or links FAIL or WARN, a rack finding or a failed rack verdict where nothing was planted.

    python -m benchmarks.fleet_racks                  # 16,384 nodes, 5% noise, 5% refused: rounds, time, floor
    python -m benchmarks.fleet_racks --nodes 2048     # smaller

The floor: the same fleet with nothing planted and nothing refused, in the same process (what any check of that
fleet costs the planner: every node tested, one all_reduce per rack, the cross-switch tests, the full scale).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_isolation import IN_NODE, NOMINAL, SWITCH_SIZE, Fleet, expectation  # noqa: E402
from gpuval.fleet.plan import FleetConfig, Round, TestResult, new_fleet, plan_next, take_round, verdicts  # noqa: E402
from gpuval.fleet.plan.causes import Cause  # noqa: E402
from gpuval.fleet.plan.racks_book import RACK_PURPOSES, RackSpec  # noqa: E402
from gpuval.fleet.plan.terms import BusbwExpectation, FleetVerdicts, NvlinkProof  # noqa: E402
from gpuval.results.model import Status  # noqa: E402

TRAYS = 18
NVL = 800.0  # an NVLink domain's all_reduce busbw in the simulated units
KINDS = ("gpu", "tray", "rack", "rack_uplink", "slow", "broken", "uplink", "tray", "gpu", "rack")
BAND = BusbwExpectation.limits(NVL, 0.6 * NVL, source="simulated rack band")
GOAL_ROUNDS = 6


@dataclass
class RackFleet(Fleet):
    """fleet_isolation's Fleet plus racks: trays, their NVLink, each rack's domain."""

    racks: dict[str, list[str]] = field(default_factory=dict)
    tray_nvlink: dict[str, float] = field(default_factory=dict)
    rack_nvlink: dict[str, float] = field(default_factory=dict)
    broken_trays: set[str] = field(default_factory=set)
    slow_trays: set[str] = field(default_factory=set)
    bad_racks: set[str] = field(default_factory=set)
    slow_gpu: set[str] = field(default_factory=set)
    uptime: dict[str, float] = field(default_factory=dict)  # node -> seconds since boot at its first node test
    down_until: dict[str, int] = field(default_factory=dict)  # tray -> node tests that still find NVLink down
    rack_of: dict[str, str] = field(default_factory=dict)

    @property
    def planted(self) -> dict[str, list[str]]:
        base = super().planted
        return {**base, "slow": sorted(set(base["slow"]) | self.slow_gpu | self.slow_trays | self.broken_trays),
                "rack": sorted(self.bad_racks)}

    def run(self, rnd: Round) -> list[TestResult]:
        return [self.rack_test(t.id, t.nodes, t.samples) if t.purpose in RACK_PURPOSES
                else self.measure(t.id, t.kind, t.nodes, t.samples) for t in rnd.tests]

    def measure(self, test_id: str, kind: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        found = super().measure(test_id, kind, nodes, samples)
        if kind != "node" or found.not_run:
            return found
        node = nodes[0]
        rack = self.rack_of.get(node)
        domain = f"0f1e2d3c-{int(rack[4:]):04d}-4000-8000-00000000abcd.{1000 + int(rack[4:])}" if rack else None
        uptime = self.uptime.get(node, 86400.0)
        self.uptime[node] = uptime + 600.0  # its next node test runs after the settle time
        if self.down_until.get(node, 0) > 0:  # NVLink still training after the boot
            self.down_until[node] -= 1
            return replace(found, health=Status.FAIL, health_reason="nvlink: GPU 0: 0 of 18 NVLinks up",
                           domain=domain, uptime_s=uptime, health_codes=("NVLINK_DOWN",))
        if node in self.slow_gpu and found.busbw:
            found = replace(found, busbw={c: tuple(x * self.in_node[node] for x in v) for c, v in found.busbw.items()})
        return replace(found, domain=domain, uptime_s=uptime)

    def rack_test(self, test_id: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        """A test inside a rack: over NVLink, at the slowest of the domain and its trays."""
        if self.refuse and self.rng.random() < self.refuse:
            return TestResult(test_id, not_run="the engine refused the job (simulated)")
        broken = [n for n in nodes if n in self.broken_trays]
        if broken:
            return TestResult(test_id, error=f"NCCL error: unhandled cuda error (NVLink) on {broken[0]}",
                              blame=(broken[0],))
        truth = NVL * min([self.rack_nvlink[self.rack_of[nodes[0]]]] + [self.tray_nvlink[n] for n in nodes])
        ranks = 4 * len(nodes)
        return TestResult(test_id, self._samples({"all_reduce": truth}, samples),
                          nvlink=NvlinkProof(ranks, ranks, ranks))


def make_rack_fleet(hgx: int, racks: int, faults: int, seed: int, noise: float = 0.05, refuse: float = 0.0,
                    kinds: tuple[str, ...] = KINDS) -> RackFleet:
    """`hgx` HGX nodes under switches of 16 and `racks` racks of 18 trays, `faults` planted in the order of `kinds`."""
    rng = random.Random(f"racks:{hgx}:{racks}:{faults}:{seed}")
    nodes = [f"node{i:05d}" for i in range(hgx)] + [f"tray{i:05d}" for i in range(racks * TRAYS)]
    groups = {n: f"sw{i // SWITCH_SIZE:04d}" for i, n in enumerate(nodes[:hgx])}
    rack_of = {t: f"rack{i // TRAYS:04d}" for i, t in enumerate(nodes[hgx:])}
    groups.update(rack_of)  # a rack's trays hang off one leaf: the rack's uplink
    fleet = RackFleet(nodes, groups, {n: rng.uniform(0.985, 1.015) for n in nodes},
                      {n: rng.uniform(0.985, 1.015) for n in nodes}, {g: 1.0 for g in set(groups.values())}, {},
                      set(), noise, refuse, random.Random(f"noise:{seed}:{hgx}:{racks}"))
    fleet.rack_of = rack_of
    fleet.racks = {r: [t for t in rack_of if rack_of[t] == r] for r in sorted(set(rack_of.values()))}
    fleet.tray_nvlink = {t: rng.uniform(0.985, 1.015) for t in rack_of}
    fleet.rack_nvlink = {r: 1.0 for r in fleet.racks}
    _plant(fleet, rng, list(kinds[:faults]), hgx)
    return fleet


def _plant(fleet: RackFleet, rng: random.Random, kinds: list[str], hgx: int) -> None:
    """Each fault on a node, tray, rack or switch nothing else was planted on (one fault per rack, per switch)."""
    hosts = [n for n in fleet.nodes[:hgx]]
    racks, switches = list(fleet.racks), sorted({fleet.groups[n] for n in hosts})
    rng.shuffle(racks)
    rng.shuffle(hosts)
    rng.shuffle(switches)
    for i, kind in enumerate(kinds):
        if kind in ("slow", "broken", "uplink") or (kind == "gpu" and i % 2 == 0):
            if not hosts or (kind == "uplink" and not switches):
                continue
            node = hosts.pop()
            if kind == "gpu":
                fleet.slow_gpu.add(node)
                fleet.in_node[node] = 1.0 - rng.uniform(0.10, 0.30)
            elif kind == "slow":
                fleet.speed[node] = 1.0 - rng.uniform(0.05, 0.30)
                fleet.slow.add(node)
            elif kind == "broken":
                fleet.broken[node] = "hang" if i % 2 else "crash"
            else:
                fleet.uplink[switches.pop()] = 1.0 - rng.uniform(0.05, 0.30)
            continue
        if not racks:
            continue
        rack = racks.pop()
        tray = rng.choice(fleet.racks[rack])
        if kind == "gpu":
            fleet.slow_gpu.add(tray)
            fleet.in_node[tray] = 1.0 - rng.uniform(0.10, 0.30)
        elif kind == "tray" and len(fleet.slow_trays) > len(fleet.broken_trays):
            fleet.broken_trays.add(tray)
        elif kind == "tray":
            fleet.tray_nvlink[tray] = 1.0 - rng.uniform(0.08, 0.30)
            fleet.slow_trays.add(tray)
        elif kind == "rack":
            fleet.rack_nvlink[rack] = 1.0 - rng.uniform(0.10, 0.40)
            fleet.bad_racks.add(rack)
        else:
            fleet.uplink[rack] = 1.0 - rng.uniform(0.05, 0.30)


def rack_spec(fleet: RackFleet) -> RackSpec:
    """What the simulated check knows of its racks: NVL72 domains of 18 trays and the simulated rack band; the
    racks themselves come from the trays' node tests (their domains)."""
    return RackSpec(trays=TRAYS, band=BAND)


def run_racks(fleet: RackFleet, config: FleetConfig | None = None) -> dict:
    """Drive the planner over the fleet; score its verdicts."""
    state = new_fleet(fleet.nodes, config or FleetConfig(), expectation, fleet.groups, rack_spec(fleet))
    t0 = time.process_time()
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, fleet.run(rnd))
    found = verdicts(state)
    return {**score(fleet, found), "seconds": round(time.process_time() - t0, 2)}


def score(fleet: RackFleet, v: FleetVerdicts) -> dict:
    """found / missed / false positives, and each rack fault's findings (one each)."""
    planted = fleet.planted
    bad_nodes = set(planted["broken"]) | set(planted["slow"])
    bad_racks = set(planted["rack"])
    bad_up = set(planted["uplink"]) | {g for g, u in fleet.uplink.items() if u < 1.0}
    failed = {n for n, x in v.nodes.items() if x.status is Status.FAIL}
    flagged = {n for n, x in v.nodes.items() if x.status in (Status.FAIL, Status.WARN)}
    rack_findings: dict[str, int] = {}
    rack_failed = set()
    for g in v.groups:
        if g.subject.startswith("rack ") and g.status is Status.FAIL and g.members:
            rack = fleet.rack_of[g.members[0]]  # the check names a rack by its NVLink domain
            rack_failed.add(rack)
            if g.cause is Cause.RACK:
                rack_findings[rack] = rack_findings.get(rack, 0) + 1
    once = {r for r in bad_racks if rack_findings.get(r) == 1 and not failed & set(fleet.racks[r])}
    failed_up = {s for s, x in v.uplinks.items() if x.status is Status.FAIL}
    flagged_up = {s for s, x in v.uplinks.items() if x.status in (Status.FAIL, Status.WARN)}
    faulty_racks = bad_racks | {fleet.rack_of[n] for n in bad_nodes if n in fleet.rack_of}
    fp = (len(flagged - bad_nodes) + len(flagged_up - bad_up) + len(set(rack_findings) - bad_racks)
          + len(rack_failed - faulty_racks)
          + sum(x.status in (Status.FAIL, Status.WARN) for x in v.links.values()))
    found = len(bad_nodes & failed) + len(once) + len(bad_up & failed_up)
    total = len(bad_nodes) + len(bad_racks) + len(bad_up)
    return {"planted": total, "found": found, "missed": total - found, "false_positives": fp, "rounds": v.rounds,
            "errors": sum(x.status is Status.ERROR for x in v.nodes.values()),
            "undecided": sum(x.status is Status.SKIPPED and x.cause is Cause.UNDECIDED for x in v.nodes.values())}


def main(argv: list[str] | None = None) -> int:
    """Print rounds and seconds of the planted fleet against its floor; exit 1 when the goal is not met."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16384, help="nodes in all: half HGX, half trays in racks of 18")
    ap.add_argument("--faults", type=int, default=len(KINDS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--refuse", type=float, default=0.05)
    args = ap.parse_args(argv)
    racks = args.nodes // 2 // TRAYS  # about half the fleet in racks, the rest whole switches of 16 HGX nodes (a
    while (args.nodes - racks * TRAYS) % SWITCH_SIZE:  # switch of 2 could never have its uplink judged)
        racks += 1
    hgx = args.nodes - racks * TRAYS
    floor = run_racks(make_rack_fleet(hgx, racks, 0, 0, args.noise, 0.0))
    print(f"fleet_racks: {hgx} HGX nodes + {racks} racks of {TRAYS} trays ({hgx + racks * TRAYS} nodes), "
          f"{100 * args.noise:g}% noise, {100 * args.refuse:g}% of tests refused; CPU seconds of the planner")
    print(f"floor (nothing planted, nothing refused): {floor['rounds']} rounds, {floor['seconds']:.1f} s")
    met = True
    for seed in range(args.seeds):
        got = run_racks(make_rack_fleet(hgx, racks, args.faults, seed, args.noise, args.refuse))
        ok = got["missed"] == 0 and got["false_positives"] == 0 and got["rounds"] <= GOAL_ROUNDS
        met &= ok
        print(f"seed {seed}: {got['planted']} planted, {got['found']} found, {got['missed']} missed, "
              f"{got['false_positives']} false positives, {got['rounds']} rounds, {got['seconds']:.1f} s "
              f"({got['seconds'] / max(floor['seconds'], 1e-9):.2f} x the floor), {got['errors']} could not run, "
              f"{got['undecided']} undecided")
    print(f"goal (nothing missed, no false positive, at most {GOAL_ROUNDS} rounds): {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
