"""Communication fail-slows (gpuval.diagnosis.comm): on step records built to a plan, as a data-parallel job's ranks
print them (each rank computes, then waits for the slowest rank and the transfer): a link that turns slow mid-run,
a healthy job's jitter, a straggler, too few windows, and the job's bus bandwidth against a fleet band (below it,
within it, at messages too small to judge, no band). The real link is test_comm_slurm.py's."""

from __future__ import annotations

import random

import pytest

from gpuval.baselines import Band, Baseline
from gpuval.diagnosis.comm import FLOOR, find_comm_slow
from gpuval.hooks.record import Stats, StepRecord, Transfer

N = 10  # steps per window
NODES = {r: f"node-{r // 2}" for r in range(8)}


def _window(index: int, compute: dict[int, float], transfer: float, bus: int | None) -> list[StepRecord]:
    step = max(compute.values()) + transfer
    return [StepRecord(rank=r, local_rank=r % 2, world=len(compute), host=f"h{r // 2}", pid=100 + r,
                       first=index * N, last=index * N + N - 1, n=N, t0=1000.0 + index, t1=1001.0 + index,
                       step_s=Stats(step * N, step, step), compute_s=Stats(c * N, c, c),
                       wait_s=Stats((step - c) * N, step - c, step - c), coll=N,
                       xfer=None if bus is None else Transfer(bus * N, (step - c) * N))
            for r, c in compute.items()]


def _job(windows: int, transfer: float = 0.005, slow_from: int | None = None, slow_transfer: float = 0.4,
         noise: float = 0.0, straggler: int | None = None, bus: int | None = None, seed: int = 3) -> list[StepRecord]:
    """An 8-rank job: compute 100 ms a step (with noise), then the transfer; from window `slow_from` the transfer
    takes `slow_transfer` (a slow link) or rank `straggler` computes 60 ms longer."""
    rng = random.Random(seed)
    records = []
    for w in range(windows):
        later = slow_from is not None and w >= slow_from
        compute = {r: 0.100 + rng.gauss(0, noise) for r in range(8)}
        if later and straggler is not None:
            compute[straggler] += 0.060
        took = (slow_transfer if later and straggler is None else transfer) + abs(rng.gauss(0, noise))
        records += _window(w, compute, took, bus)
    return records


def test_a_link_that_turns_slow_is_communication_slow_with_the_time_lost_and_the_jobs_links():
    report = find_comm_slow(_job(22, slow_from=14), NODES)
    assert report.outcome == "communication slow", report.reason
    assert report.since_step == 140
    flagged = [w for w in report.windows if w.flagged]
    assert [w.first for w in flagged] == [140 + 10 * i for i in range(8)]
    assert all(w.lost_s == pytest.approx((0.4 - 0.005) * N) for w in flagged)
    assert report.lost_s == pytest.approx(8 * 0.395 * N)
    assert report.lost_fraction == pytest.approx(8 * 0.395 / (8 * 0.5 + 2 * 0.105))
    assert "every rank waits 400 ms a step against its own early 5 ms while computing 100 ms" in report.reason
    assert report.suspect is not None and report.suspect.kind == "links"
    assert report.suspect.nodes == ["node-0", "node-1", "node-2", "node-3"]
    assert "no node is named by this rule alone" in report.suspect.why


def test_a_healthy_jobs_jitter_is_never_communication_slow():
    for seed in range(20):
        report = find_comm_slow(_job(22, noise=0.004, seed=seed), NODES)
        assert report.outcome == "none" and report.suspect is None, (seed, report.reason)


def test_a_rise_under_the_floor_is_not_communication_slow():
    # every rank waits 8 ms longer, persistently: under 10% of the 105 ms step
    report = find_comm_slow(_job(22, slow_from=11, slow_transfer=0.005 + 0.8 * FLOOR * 0.105), NODES)
    assert report.outcome == "none", report.reason


def test_a_straggler_is_not_communication_slow():
    report = find_comm_slow(_job(22, slow_from=11, straggler=5), NODES)
    assert report.outcome == "none" and "in 0 of the last 10 windows" in report.reason


def test_too_few_windows_are_not_judged():
    report = find_comm_slow(_job(5, slow_from=3), NODES)
    assert report.outcome == "not judged" and "the rule needs 6" in report.reason
    assert find_comm_slow([], NODES).outcome == "not judged"


def _baseline(fail: float, size: int) -> Baseline:
    band = Band("allreduce_busbw_multinode_gbps", unit="GB/s", size_bytes=size, expected=fail * 1.2,
                warn_below=fail * 1.05, fail_below=fail, expected_source="a fleet", fail_source="a policy",
                warn_source="a policy")
    return Baseline("ND-test", bands={band.name: band})


def test_the_bus_bandwidth_is_judged_against_the_fleets_band():
    """8 ranks moving 64 MiB of bus bytes a step in 5 ms: 13.4 GB/s, the same from the job's start."""
    records = _job(22, bus=64 * 2**20)
    no_band = find_comm_slow(records, NODES)
    assert no_band.outcome == "none" and no_band.bandwidth.outcome == "not judged"
    assert no_band.bandwidth.gbps == pytest.approx(64 * 2**20 / 0.005 / 1e9)
    assert "no SKU baseline or profile given" in no_band.bandwidth.reason
    slow = find_comm_slow(records, NODES, _baseline(380, 32 * 2**20))
    assert slow.outcome == "communication slow" and slow.bandwidth.outcome == "below band", slow.reason
    assert "13.42 GB/s against allreduce_busbw_multinode_gbps: 13.4218 GB/s is under the fail limit 380" in slow.reason
    assert slow.suspect is not None and slow.suspect.nodes == ["node-0", "node-1", "node-2", "node-3"]
    assert slow.lost_s == pytest.approx(10 * 0.005 * N * (1 - 13.4217728 / 456))
    small = find_comm_slow(records, NODES, _baseline(380, 16 * 2**30))
    assert small.outcome == "none" and small.bandwidth.outcome == "not judged"
    assert "its collectives move 64 MiB each against the band's 28 GiB" in small.bandwidth.reason
    fast = find_comm_slow(records, NODES, _baseline(10, 16 * 2**30))
    assert fast.outcome == "none" and fast.bandwidth.outcome == "within band"


def test_a_band_for_other_ranks_judges_nothing():
    baseline = _baseline(380, 32 * 2**20)
    baseline.bands["gpu_count"] = Band("gpu_count", expected=4)  # 8 ranks on 4 nodes of 4 GPUs: not the band's

    report = find_comm_slow(_job(22, bus=64 * 2**20), NODES, baseline)
    assert report.bandwidth.outcome == "not judged", report.bandwidth.reason
