"""Bad-node isolation on simulated fleets: gpuval's fleet planner against exhaustive pairwise and plain bisection.

The fleet model (synthetic, seeded; units are GB/s of a made-up SKU, not a real one's figures):
- nodes under leaf switches of 16 (topology-aware runs) or with no topology (random pairing);
- each healthy node's network speed is 1 +- 1.5% (uniform) of nominal, its in-node all_reduce likewise;
- planted faults: broken nodes (every test with them crashes, naming the node, or hangs, naming nobody), slow
  nodes (network 5-30% under nominal, uniform), bad links: a leaf switch's uplink 5-30% under, so every pair or
  group that crosses that switch is slowed (a fault on one specific node pair can only be found by testing that
  pair, which only exhaustive pairing does, so the model plants uplink faults);
- a pair's true busbw is nominal x min(its nodes' speeds, the uplinks it crosses); a group's is nominal x the
  slowest member and crossed uplink; a node test's is its in-node speed;
- measurement noise: every sample = truth x (1 + N(0, sigma)), independent, sigma = 3% by default; a test of
  k samples gives k such figures per collective (nccl-tests -N cycles).

Each method is scored against the planted faults: found = a planted node or uplink with a FAIL verdict; missed =
planted and not found; false_positives = healthy nodes, uplinks or node-pair links given FAIL or WARN.

    python -m benchmarks.fleet_isolation            # 64 .. 16,384 nodes, 0..8 faults (minutes)
    python -m benchmarks.fleet_isolation --quick    # CI-sized
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field

from benchmarks.fleet_baselines import bisection, exhaustive
from gpuval.results.model import Status
from gpuval.fleet import (
    BusbwExpectation, FleetConfig, Round, TestResult, new_fleet, plan_next, record, verdicts,
)

NOMINAL = {"all_reduce": 100.0, "sendrecv": 40.0}
IN_NODE = 200.0
SWITCH_SIZE = 16
KINDS = ("slow", "broken", "uplink", "slow", "broken", "slow", "uplink", "slow")


@dataclass
class Fleet:
    """A simulated fleet: true speeds, planted faults, and the noise of every measurement."""

    nodes: list[str]
    groups: dict[str, str]
    speed: dict[str, float]
    in_node: dict[str, float]
    uplink: dict[str, float]
    broken: dict[str, str]
    slow: set[str]
    noise: float
    refuse: float = 0.0
    rng: random.Random = field(default_factory=random.Random)

    @property
    def planted(self) -> dict[str, list[str]]:
        """The planted faults by kind."""
        return {
            "broken": sorted(self.broken),
            "slow": sorted(self.slow),
            "uplink": sorted(sw for sw, u in self.uplink.items() if u < 1.0),
        }

    def pair_truth(self, nodes: tuple[str, ...]) -> float:
        """True busbw factor of a pair or group: its slowest node, and the uplinks it crosses."""
        switches = {self.groups.get(n, "") for n in nodes}
        crossed = [self.uplink.get(sw, 1.0) for sw in switches] if len(switches) > 1 else []
        return min([self.speed[n] for n in nodes] + crossed)

    def run(self, rnd: Round) -> list[TestResult]:
        """Every test of a round, measured."""
        return [self.measure(t.id, t.kind, t.nodes, t.samples) for t in rnd.tests]

    def measure(self, test_id: str, kind: str, nodes: tuple[str, ...], samples: int) -> TestResult:
        """One test's result: could not run (refusal rate), crashed or hung (a broken node), or its samples."""
        if self.refuse and self.rng.random() < self.refuse:
            return TestResult(test_id, not_run="the engine refused the job (simulated)")
        broken = [n for n in nodes if n in self.broken]
        if broken:
            n = broken[0]
            if self.broken[n] == "hang":
                return TestResult(test_id, error="timed out after 600 s (hang)")
            return TestResult(test_id, error=f"NCCL error: unhandled system error on {n}", blame=(n,))
        if kind == "node":
            truth = {"all_reduce": IN_NODE * self.in_node[nodes[0]]}
            return TestResult(test_id, self._samples(truth, samples), health=Status.PASS)
        factor = self.pair_truth(nodes)
        colls = ("all_reduce", "sendrecv") if kind == "pair" else ("all_reduce",)
        return TestResult(test_id, self._samples({c: NOMINAL[c] * factor for c in colls}, samples))

    def _samples(self, truth: dict[str, float], k: int) -> dict[str, tuple[float, ...]]:
        g = self.rng.gauss
        return {c: tuple(v * (1.0 + g(0.0, self.noise)) for _ in range(k)) for c, v in truth.items()}


def make_fleet(n: int, faults: int, seed: int, noise: float = 0.03, topology: bool = True,
               refuse: float = 0.0) -> Fleet:
    """A fleet of `n` nodes with `faults` planted faults (kinds in the order of KINDS; uplinks only with a
    topology, else slow nodes)."""
    rng = random.Random(f"fleet:{n}:{faults}:{seed}")
    nodes = [f"node{i:05d}" for i in range(n)]
    groups = {nd: f"sw{i // SWITCH_SIZE:04d}" for i, nd in enumerate(nodes)} if topology else {}
    speed = {nd: rng.uniform(0.985, 1.015) for nd in nodes}
    in_node = {nd: rng.uniform(0.985, 1.015) for nd in nodes}
    switches = sorted(set(groups.values()))
    uplink = {sw: 1.0 for sw in switches}
    broken: dict[str, str] = {}
    slow: set[str] = set()
    victims = rng.sample(nodes, faults)
    bad_switches = rng.sample(switches, min(faults, len(switches))) if switches else []
    for i, kind in enumerate(KINDS[:faults]):
        if kind == "uplink" and bad_switches:
            uplink[bad_switches.pop()] = 1.0 - rng.uniform(0.05, 0.30)
        elif kind == "broken":
            broken[victims[i]] = "hang" if i % 2 else "crash"
        else:
            speed[victims[i]] = 1.0 - rng.uniform(0.05, 0.30)
            slow.add(victims[i])
    return Fleet(nodes, groups, speed, in_node, uplink, broken, slow, noise, refuse,
                 random.Random(f"noise:{seed}:{n}"))


def expectation(coll: str, n: int) -> BusbwExpectation:
    """The simulated SKU: nominal busbw at every node count, failing 10% under (like a baseline's fail limit)."""
    value = IN_NODE if n == 1 else NOMINAL[coll]
    return BusbwExpectation.limits(value, 0.9 * value, source="simulated SKU")


def run_planner(fleet: Fleet, config: FleetConfig | None = None, expect=expectation) -> dict:
    """Drive gpuval's planner over the fleet; score its verdicts."""
    state = new_fleet(fleet.nodes, config or FleetConfig(), expect, fleet.groups or None)
    tests = samples = 0
    plan_s = 0.0
    while True:
        t0 = time.perf_counter()
        rnd = plan_next(state)
        plan_s = max(plan_s, time.perf_counter() - t0)
        if rnd is None:
            break
        tests += len(rnd.tests)
        samples += sum(t.samples * len(t.collectives) for t in rnd.tests)
        record(state, rnd, fleet.run(rnd))
    v = verdicts(state)
    flagged_nodes = {n for n, x in v.nodes.items() if x.status in (Status.FAIL, Status.WARN)}
    failed_nodes = {n for n, x in v.nodes.items() if x.status == Status.FAIL}
    failed_up = {s for s, x in v.uplinks.items() if x.status == Status.FAIL}
    flagged_up = {s for s, x in v.uplinks.items() if x.status in (Status.FAIL, Status.WARN)}
    flagged_links = [k for k, x in v.links.items() if x.status in (Status.FAIL, Status.WARN)]
    out = score(fleet, failed_nodes, flagged_nodes, failed_up, flagged_up, len(flagged_links), v.rounds)
    out.update(tests=tests, samples=samples, plan_seconds_max=round(plan_s, 4),
               errors=sum(x.status == Status.ERROR for x in v.nodes.values()))
    return out


def score(fleet: Fleet, failed_nodes: set[str], flagged_nodes: set[str], failed_up: set[str], flagged_up: set[str],
          bad_links: int, rounds: int) -> dict:
    """found / missed / false positives of one method on one fleet."""
    planted = fleet.planted
    bad_nodes = set(planted["broken"]) | set(planted["slow"])
    bad_up = set(planted["uplink"])
    found = len(bad_nodes & failed_nodes) + len(bad_up & failed_up)
    total = len(bad_nodes) + len(bad_up)
    fp = len(flagged_nodes - bad_nodes) + len(flagged_up - bad_up) + bad_links
    return {"found": found, "false_positives": fp, "missed": total - found, "rounds": rounds}


def run_baseline(fleet: Fleet, method: str, cut: float = 0.03) -> dict:
    """Exhaustive pairwise or plain bisection on the same fleet, scored like the planner."""
    res = exhaustive(fleet, cut) if method == "exhaustive" else bisection(fleet, cut)
    failed = res["failed_nodes"]
    out = score(fleet, failed, failed, set(), set(), res["bad_links"], res["rounds"])
    out["tests"] = res["tests"]
    return out


def one_fleet(n: int, faults: int, seed: int, noise: float, topology: bool, refuse: float,
              exhaustive_max: int) -> dict:
    """One row of the JSON: the planner and both baselines on the same planted fleet."""
    planted = make_fleet(n, faults, seed, noise, topology).planted
    row = {"nodes": n, "pairing": "topology" if topology else "random", "seed": seed,
           "planted": {**{k: len(v) for k, v in planted.items()}, "total": sum(map(len, planted.values()))}}
    row.update(run_planner(make_fleet(n, faults, seed, noise, topology, refuse)))
    if n <= exhaustive_max:
        row["exhaustive"] = run_baseline(make_fleet(n, faults, seed, noise, topology), "exhaustive")
    else:
        row["exhaustive"] = {"rounds": n - 1, "simulated": False}
    row["bisection"] = run_baseline(make_fleet(n, faults, seed, noise, topology), "bisection")
    return row


def summarize(rows: list[dict]) -> dict:
    """Totals per fleet size and pairing, and whether the issue's targets hold."""
    by: dict[str, dict] = {}
    for r in rows:
        s = by.setdefault(f"{r['nodes']}/{r['pairing']}", {"fleets": 0, "planted": 0})
        s["fleets"] += 1
        s["planted"] += r["planted"]["total"]
        for name, part in (("planner", r), ("exhaustive", r["exhaustive"]), ("bisection", r["bisection"])):
            t = s.setdefault(name, {"found": 0, "false_positives": 0, "missed": 0, "max_rounds": 0})
            for k in ("found", "false_positives", "missed"):
                if k in part:
                    t[k] += part[k]
            t["max_rounds"] = max(t["max_rounds"], part["rounds"])
    targets = {
        "every_fault_found": all(r["missed"] == 0 for r in rows),
        "no_false_positive": all(r["false_positives"] == 0 for r in rows),
        "max_rounds_up_to_4096_nodes": max((r["rounds"] for r in rows if r["nodes"] <= 4096), default=0),
        "max_rounds_all": max(r["rounds"] for r in rows),
        "max_plan_seconds": max(r["plan_seconds_max"] for r in rows),
    }
    targets["rounds_target_met"] = targets["max_rounds_up_to_4096_nodes"] <= 6
    return {"by_size": by, "targets": targets}


def main(argv: list[str] | None = None) -> int:
    """Run the matrix and print one JSON document."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized: 64 and 256 nodes, 2 seeds")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--faults", type=int, nargs="*", default=[0, 1, 4, 8])
    ap.add_argument("--seeds", type=int, default=None, help="seeds per (size, faults); default 3, 1 above 1024")
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--refuse", type=float, default=0.0, help="fraction of tests the engine refuses (could not run)")
    ap.add_argument("--pairing", choices=("topology", "random", "both"), default="both")
    ap.add_argument("--exhaustive-max", type=int, default=16384, help="simulate exhaustive pairing up to N nodes")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([64, 256] if args.quick else [64, 256, 1024, 4096, 16384])
    modes = {"topology": [True], "random": [False], "both": [True, False]}[args.pairing]
    rows = []
    t0 = time.perf_counter()
    for n in sizes:
        seeds = args.seeds or (2 if args.quick else (3 if n <= 1024 else 1))
        for topology in modes:
            for faults in args.faults:
                for seed in range(seeds):
                    rows.append(one_fleet(n, faults, seed, args.noise, topology, args.refuse, args.exhaustive_max))
    doc = {"noise": args.noise, "refuse": args.refuse, "seconds": round(time.perf_counter() - t0, 1),
           "runs": rows, **summarize(rows)}
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
