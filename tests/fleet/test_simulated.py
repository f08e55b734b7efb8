"""The planner against simulated fleets (benchmarks/fleet_isolation.py's model): property-style over many seeded
fleets, both pairings, 3% measurement noise, and a harsh fabric (5% noise, 5% of tests refused) at 1,024 nodes, with
and without nodes whose GPUs are slow.
Bounded: each fleet takes under a second of CPU here (a harsh 1,024-node one about half a second)."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from benchmarks.fleet_baselines import circle_round
from benchmarks.fleet_isolation import expectation, make_fleet, main, run_baseline, run_planner
from gpuval.results.model import Status
from gpuval.fleet.plan import Cause, FleetConfig, new_fleet, plan_next, take_round
from gpuval.fleet.plan import verdicts


@pytest.mark.parametrize("topology", [True, False], ids=["topology", "random"])
def test_every_fault_found_and_no_false_positive_at_3_percent_noise(topology):
    rng = random.Random(12)
    t0 = time.perf_counter()
    for k in range(24):
        n = rng.choice([64, 96, 128, 256])
        faults = rng.randint(0, 8)
        r = run_planner(make_fleet(n, faults, seed=100 + k, noise=0.03, topology=topology))
        assert (r["missed"], r["false_positives"]) == (0, 0), (n, faults, k, r)
        assert r["rounds"] <= 6, (n, faults, k, r)
        assert r["errors"] == 0
    assert time.perf_counter() - t0 < 60


def test_up_to_eight_faults_among_4096_nodes_take_at_most_six_rounds():
    r = run_planner(make_fleet(4096, 8, seed=7))
    assert r["found"] == 8 and r["missed"] == 0 and r["false_positives"] == 0
    assert r["rounds"] <= 6
    # The planner's speed is benchmarks/fleet_isolation.py's to measure (a timed assertion here failed on a loaded
    # 2-core machine at 1.01 s); this bound only catches a planner that hangs or goes quadratic at 4096 nodes.
    assert r["plan_seconds_max"] < 10


@pytest.mark.parametrize("topology", [True, False], ids=["topology", "random"])
def test_a_harsh_fabric_every_fault_found_nothing_healthy_flagged_in_at_most_six_rounds(topology):
    """`python -m benchmarks.fleet_isolation --harsh` at CI size: 1,024 nodes, 5% noise on every sample, one test
    in 20 refused by the engine (the full-scale run too), 8 planted faults. The tests of a noisy fleet take the
    samples its noise needs, a refused test is run again (a node is given up only after 3 refusals in a row), and the
    full-scale run goes beside the last nodes' re-tests instead of after them."""
    t0 = time.process_time()
    for seed in range(5):
        r = run_planner(make_fleet(1024, 8, seed=seed, noise=0.05, topology=topology, refuse=0.05))
        assert (r["missed"], r["false_positives"]) == (0, 0), (seed, r)
        assert r["rounds"] <= 6, (seed, r)
        assert r["errors"] <= 2, (seed, r)  # 3 refusals in a row: about one node in 2,500
    assert time.process_time() - t0 < 20


@pytest.mark.parametrize("topology", [True, False], ids=["topology", "random"])
def test_nodes_whose_gpus_all_run_slow_are_named_for_them_on_a_harsh_fabric_and_no_healthy_node_is(topology):
    """`python -m benchmarks.fleet_isolation --harsh --gpu-slow 4` at CI size: every node test also reports its 8
    GPUs' GEMM and HBM figures with 5% noise on each, and 4 nodes whose GPUs all run 15-40% slow are planted beside
    the 8 network faults (5% noise, one test in 20 refused). Each of the 4 fails for its GPUs (GPUS_SLOW, compared
    with the fleet's other nodes), every other fault is still found, nothing healthy is flagged (FAIL or WARN), in at
    most 6 rounds."""
    t0 = time.process_time()
    for seed in range(2):
        fleet = make_fleet(1024, 8, seed=seed, noise=0.05, topology=topology, refuse=0.05, gpu_slow=4)
        state = new_fleet(fleet.nodes, FleetConfig(), expectation, fleet.groups or None)
        while (rnd := plan_next(state)) is not None:
            take_round(state, rnd, fleet.run(rnd))
        found = verdicts(state)
        assert {n: found.nodes[n].cause for n in fleet.gpu_slow} == dict.fromkeys(fleet.gpu_slow, Cause.GPUS_SLOW)
        bad = set(fleet.broken) | fleet.slow | fleet.gpu_slow
        flagged = {n for n, v in found.nodes.items() if v.status in (Status.FAIL, Status.WARN)}
        assert flagged - bad == set(), [(n, found.nodes[n].reason) for n in flagged - bad]
        missed = {n: found.nodes[n].status for n in bad if found.nodes[n].status is not Status.FAIL}
        assert set(missed.values()) <= {Status.ERROR}, missed  # only one refused 3 times in a row: could not run
        assert found.rounds <= 6, (seed, found.rounds)
    assert time.process_time() - t0 < 20


def test_refused_tests_only_ever_give_could_not_run_never_a_hardware_verdict():
    for seed in range(6):
        fleet = make_fleet(128, 4, seed=seed, refuse=0.05)
        state = new_fleet(fleet.nodes, FleetConfig(), None, fleet.groups)
        while (rnd := plan_next(state)) is not None:
            take_round(state, rnd, fleet.run(rnd))
        v = verdicts(state)
        bad = set(fleet.broken) | fleet.slow
        wrongly = [n for n, x in v.nodes.items() if n not in bad and x.status in (Status.FAIL, Status.WARN)]
        assert not wrongly, [(n, v.nodes[n].reason) for n in wrongly]
        for n in bad:
            assert v.nodes[n].status in (Status.FAIL, Status.ERROR), (n, v.nodes[n].reason)


def test_the_same_seed_gives_the_same_rounds():
    def rounds(seed):
        fleet = make_fleet(64, 4, seed=3)
        state = new_fleet(fleet.nodes, FleetConfig(seed=seed), None, fleet.groups)
        out = []
        while (rnd := plan_next(state)) is not None:
            out.append(rnd)
            take_round(state, rnd, fleet.run(rnd))
        return out

    assert rounds(1) == rounds(1)
    assert rounds(1) != rounds(2)


def test_the_circle_method_meets_every_pair_once_in_n_minus_1_rounds():
    for n in range(2, 14, 2):
        met = [frozenset(p) for r in range(n - 1) for p in circle_round(n, r)]
        assert len(met) == len(set(met)) == n * (n - 1) // 2
        for r in range(n - 1):
            assert sorted(i for p in circle_round(n, r) for i in p) == list(range(n))


def test_the_baselines_run_on_the_same_fleets():
    fleet = make_fleet(64, 4, seed=1, topology=False)
    ex = run_baseline(fleet, "exhaustive")
    assert ex["rounds"] == 63 and ex["tests"] == 64 * 63 // 2 and ex["missed"] == 0
    bis = run_baseline(make_fleet(64, 4, seed=1, topology=False), "bisection")
    assert bis["rounds"] >= 6  # log2(64) levels at least


def test_the_benchmark_prints_the_figures_the_issue_asks_for(capsys):
    assert main(["--sizes", "64", "--faults", "0", "4", "--seeds", "1"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    for row in doc["runs"]:
        for key in ("nodes", "planted", "found", "false_positives", "missed", "rounds"):
            assert key in row
        for base in ("exhaustive", "bisection"):
            assert {"found", "false_positives", "missed", "rounds"} <= set(row[base])
    assert doc["targets"]["every_fault_found"] and doc["targets"]["no_false_positive"]
    assert list(itertools.islice(doc["by_size"], 2)) == ["64/topology", "64/random"]
