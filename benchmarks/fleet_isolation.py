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
- with GPU figures (`gpu_slow` given, --gpu-slow): every node test's health suite also reports 8 GPUs' burst GEMM
  and HBM copy figures (GPU_FIGURES), each GPU 1 +- 1.5% of nominal per node, and `gpu_slow` healthy nodes planted
  whose eight GPUs all run 15-40% under (what only a comparison across nodes sees: its GPUs agree with each other);
  each value has the same noise as a sample, drawn from a generator of its own (the busbw samples stay those of the
  same fleet without GPU figures);
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
from gpuval.fleet.plan import (
    BusbwExpectation, FleetConfig, Round, TestResult, new_fleet, plan_next, take_round, verdicts,
)
from gpuval.fleet.plan.terms import Measured, NodeFigures

NOMINAL = {"all_reduce": 100.0, "sendrecv": 40.0}
IN_NODE = 200.0
SWITCH_SIZE = 16
KINDS = ("slow", "broken", "uplink", "slow", "broken", "slow", "uplink", "slow")
GOAL_ROUNDS = 6  # the target: every fault found, no false positive, in at most this many rounds
GPU_MODEL = "simulated GPU"
GPU_FIGURES = {"gemm_bf16_tflops": ("TFLOPS", 270.0), "hbm_memcpy_gbps": ("GB/s", 1150.0)}  # per GPU, nominal
GPUS = 8


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
    gpu: dict[str, float] = field(default_factory=dict)  # node -> its GPUs' speed (empty: no GPU figures)
    gpu_slow: set[str] = field(default_factory=set)
    gpu_rng: random.Random = field(default_factory=random.Random)

    @property
    def planted(self) -> dict[str, list[str]]:
        """The planted faults by kind."""
        return {
            "broken": sorted(self.broken),
            "slow": sorted(self.slow),
            "uplink": sorted(sw for sw, u in self.uplink.items() if u < 1.0),
            "gpu": sorted(self.gpu_slow),
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
            return TestResult(test_id, self._samples(truth, samples), health=Status.PASS, gpus=self._gpus(nodes[0]))
        factor = self.pair_truth(nodes)
        colls = ("all_reduce", "sendrecv") if kind == "pair" else ("all_reduce",)
        return TestResult(test_id, self._samples({c: NOMINAL[c] * factor for c in colls}, samples))

    def _gpus(self, node: str) -> NodeFigures | None:
        """A node suite's GPU figures: each GPU's value at its node's GPU speed, with the sample noise."""
        if not self.gpu:
            return None
        g = self.gpu_rng.gauss
        return NodeFigures(GPU_MODEL, {
            name: Measured(unit, tuple((f"GPU {i}", nominal * self.gpu[node] * (1.0 + g(0.0, self.noise)))
                                       for i in range(GPUS)))
            for name, (unit, nominal) in GPU_FIGURES.items()})

    def _samples(self, truth: dict[str, float], k: int) -> dict[str, tuple[float, ...]]:
        g = self.rng.gauss
        return {c: tuple(v * (1.0 + g(0.0, self.noise)) for _ in range(k)) for c, v in truth.items()}


def make_fleet(n: int, faults: int, seed: int, noise: float = 0.03, topology: bool = True,
               refuse: float = 0.0, gpu_slow: int | None = None) -> Fleet:
    """A fleet of `n` nodes with `faults` planted faults (kinds in the order of KINDS; uplinks only with a
    topology, else slow nodes); with `gpu_slow` (0 or more), GPU figures in every node test and that many nodes
    with slow GPUs, planted among the healthy ones (the fleet is otherwise the same as without)."""
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
    fleet = Fleet(nodes, groups, speed, in_node, uplink, broken, slow, noise, refuse,
                  random.Random(f"noise:{seed}:{n}"))
    if gpu_slow is not None:
        _plant_gpus(fleet, gpu_slow, random.Random(f"gpus:{n}:{gpu_slow}:{seed}"))
    return fleet


def _plant_gpus(fleet: Fleet, count: int, rng: random.Random) -> None:
    """GPU figures for every node (its GPUs 1 +- 1.5% of nominal), `count` healthy nodes' GPUs all 15-40% under."""
    fleet.gpu = {nd: rng.uniform(0.985, 1.015) for nd in fleet.nodes}
    healthy = [nd for nd in fleet.nodes if nd not in fleet.broken and nd not in fleet.slow]
    fleet.gpu_slow = set(rng.sample(healthy, count))
    for nd in fleet.gpu_slow:
        fleet.gpu[nd] = 1.0 - rng.uniform(0.15, 0.40)
    fleet.gpu_rng = random.Random(rng.random())


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
        take_round(state, rnd, fleet.run(rnd))
    v = verdicts(state)
    flagged_nodes = {n for n, x in v.nodes.items() if x.status in (Status.FAIL, Status.WARN)}
    failed_nodes = {n for n, x in v.nodes.items() if x.status == Status.FAIL}
    failed_up = {s for s, x in v.uplinks.items() if x.status == Status.FAIL}
    flagged_up = {s for s, x in v.uplinks.items() if x.status in (Status.FAIL, Status.WARN)}
    flagged_links = [k for k, x in v.links.items() if x.status in (Status.FAIL, Status.WARN)]
    out = score(fleet, failed_nodes, flagged_nodes, failed_up, flagged_up, len(flagged_links), v.rounds)
    out.update(tests=tests, samples=samples, plan_seconds_max=round(plan_s, 4),
               errors=sum(x.status == Status.ERROR for x in v.nodes.values()),
               undecided=sum(x.status == Status.SKIPPED for x in v.nodes.values()))
    return out


def score(fleet: Fleet, failed_nodes: set[str], flagged_nodes: set[str], failed_up: set[str], flagged_up: set[str],
          bad_links: int, rounds: int) -> dict:
    """found / missed / false positives of one method on one fleet."""
    planted = fleet.planted
    bad_nodes = set(planted["broken"]) | set(planted["slow"]) | set(planted["gpu"])
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
              exhaustive_max: int, gpu_slow: int | None = None) -> dict:
    """One row of the JSON: the planner and both baselines on the same planted fleet (the baselines test the
    network only: no GPU figures)."""
    planted = make_fleet(n, faults, seed, noise, topology, gpu_slow=gpu_slow).planted
    row = {"nodes": n, "pairing": "topology" if topology else "random", "faults": faults, "seed": seed,
           "planted": {**{k: len(v) for k, v in planted.items()}, "total": sum(map(len, planted.values()))}}
    t0 = time.perf_counter()
    row.update(run_planner(make_fleet(n, faults, seed, noise, topology, refuse, gpu_slow)))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    if n <= exhaustive_max:
        row["exhaustive"] = run_baseline(make_fleet(n, faults, seed, noise, topology), "exhaustive")
    else:
        row["exhaustive"] = {"rounds": n - 1, "simulated": False}
    row["bisection"] = run_baseline(make_fleet(n, faults, seed, noise, topology), "bisection")
    return row


def summarize(rows: list[dict], goal_rounds: int = GOAL_ROUNDS) -> dict:
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
    targets["rounds_target_met"] = targets["max_rounds_up_to_4096_nodes"] <= goal_rounds
    targets["goal_met"] = (targets["every_fault_found"] and targets["no_false_positive"]
                           and targets["max_rounds_all"] <= goal_rounds)
    return {"by_size": by, "targets": targets}


TABLE = "{:>6} {:<9} {:>5} {:>8} {:>6} {:>7} {:>7} {:>10}  {:<24} {:>10} {:>7} {:>8}"
COLUMNS = ("nodes", "pairing", "runs", "planted", "found", "missed", "false+", "max rounds", "runs by rounds",
           "undecided", "errors", "seconds")


def table(rows: list[dict], goal_rounds: int, per_run: bool) -> list[str]:
    """The planner's figures as text: one line per size and pairing (one per run with `per_run`), the totals, and
    whether the goal is met (undecided and errors are healthy nodes' counts: not judged, could not run)."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["nodes"], r["pairing"]), []).append(r)
    out = [TABLE.format(*COLUMNS)]
    for (n, pairing), part in groups.items():
        if per_run:
            out += [_line(str(n), f"{pairing[:4]} f{r['faults']} s{r['seed']}", [r]) for r in part]
        out.append(_line(str(n), pairing, part))
    out.append(_line("total", "", rows))
    met = summarize(rows, goal_rounds)["targets"]["goal_met"]
    out.append(f"goal (every fault found, no false positive, at most {goal_rounds} rounds): "
               + ("met" if met else "NOT met"))
    return out


def _line(first: str, second: str, rows: list[dict]) -> str:
    counts: dict[int, int] = {}
    for r in rows:
        counts[r["rounds"]] = counts.get(r["rounds"], 0) + 1
    by_rounds = " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))
    total = {k: sum(r[k] for r in rows) for k in ("found", "missed", "false_positives", "undecided", "errors")}
    return TABLE.format(first, second, len(rows), sum(r["planted"]["total"] for r in rows), total["found"],
                        total["missed"], total["false_positives"], max(r["rounds"] for r in rows), by_rounds,
                        total["undecided"], total["errors"], f"{sum(r['seconds'] for r in rows):.0f}")


def main(argv: list[str] | None = None) -> int:
    """Run the matrix; print one JSON document (or, with --table or --harsh, the table). With --check or --harsh the
    exit status is 1 when the goal is not met."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized: 64 and 256 nodes, 2 seeds")
    ap.add_argument("--harsh", action="store_true",
                    help="4,096 and 8,192 nodes, 5%% noise, 5%% of tests refused, both pairings, 3 seeds, no "
                         "exhaustive baseline: prints the table, exits 1 unless the goal is met")
    ap.add_argument("--sizes", type=int, nargs="*", default=None)
    ap.add_argument("--faults", type=int, nargs="*", default=[0, 1, 4, 8])
    ap.add_argument("--seeds", type=int, default=None, help="seeds per (size, faults); default 3, 1 above 1024")
    ap.add_argument("--first-seed", type=int, default=0, help="the first seed (a fresh set: e.g. 1000)")
    ap.add_argument("--noise", type=float, default=None, help="per-sample noise [0.03; --harsh 0.05]")
    ap.add_argument("--refuse", type=float, default=None,
                    help="fraction of tests the engine refuses (could not run) [0; --harsh 0.05]")
    ap.add_argument("--pairing", choices=("topology", "random", "both"), default="both")
    ap.add_argument("--gpu-slow", type=int, default=None,
                    help="GPU figures in every node test, and this many nodes per fleet whose GPUs are all 15-40%% "
                         "slow, on top of the faults")
    ap.add_argument("--exhaustive-max", type=int, default=None,
                    help="simulate exhaustive pairing up to N nodes [16384; --harsh 0]")
    ap.add_argument("--goal-rounds", type=int, default=GOAL_ROUNDS, help="the most rounds the goal allows")
    ap.add_argument("--table", action="store_true", help="print the table instead of JSON")
    ap.add_argument("--runs", action="store_true", help="with the table: a line per run too")
    ap.add_argument("--check", action="store_true", help="exit 1 when the goal is not met")
    args = ap.parse_args(argv)
    harsh = args.harsh
    sizes = args.sizes or ([4096, 8192] if harsh else [64, 256] if args.quick else [64, 256, 1024, 4096, 16384])
    noise = args.noise if args.noise is not None else 0.05 if harsh else 0.03
    refuse = args.refuse if args.refuse is not None else 0.05 if harsh else 0.0
    exhaustive_max = args.exhaustive_max if args.exhaustive_max is not None else 0 if harsh else 16384
    modes = {"topology": [True], "random": [False], "both": [True, False]}[args.pairing]
    def seeds(n: int) -> range:
        count = args.seeds or (3 if harsh else 2 if args.quick else (3 if n <= 1024 else 1))
        return range(args.first_seed, args.first_seed + count)

    rows = []
    t0 = time.perf_counter()
    for n in sizes:
        for topology in modes:
            for faults in args.faults:
                rows += [one_fleet(n, faults, seed, noise, topology, refuse, exhaustive_max, args.gpu_slow)
                         for seed in seeds(n)]
    summary = summarize(rows, args.goal_rounds)
    if args.table or harsh:
        gpus = f", {args.gpu_slow} GPU-slow nodes" if args.gpu_slow is not None else ""
        print(f"fleet_isolation: {100 * noise:g}% noise, {100 * refuse:g}% of tests refused{gpus}, faults "
              f"{' '.join(map(str, args.faults))}, seeds {', '.join(f'{n}: {seeds(n).start}..{seeds(n).stop - 1}' for n in sizes)}; "
              f"{time.perf_counter() - t0:.0f} s")
        print("\n".join(table(rows, args.goal_rounds, args.runs)))
    else:
        doc = {"noise": noise, "refuse": refuse, "seconds": round(time.perf_counter() - t0, 1),
               "runs": rows, **summary}
        json.dump(doc, sys.stdout, indent=1)
        print()
    return 1 if (args.check or harsh) and not summary["targets"]["goal_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
