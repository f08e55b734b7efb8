"""The straggler analysis: on step records built to a plan (noise, one straggler, two, none, missing ranks, too
few windows or ranks, a restart, a late start against the rank's own history), and on a real 3-rank gloo job whose
last rank computes longer."""

from __future__ import annotations

import random
import subprocess

import pytest

from gpuval.diagnosis.job_records import read_job_records
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.hooks.record import Stats, StepRecord
from tests.helpers import forked_ranks
from tests.helpers.timer_jobs import SCRIPT, job_env

N = 50  # steps per window
TRANSFER = 0.005  # what the all-reduce itself takes, seconds


def _window(world: int, index: int, compute: dict[int, float], pid: int = 100) -> list[StepRecord]:
    """One window of a data-parallel job: each rank's per-step compute; the step is the slowest rank's compute
    plus the transfer; each rank waits the rest."""
    step = max(compute.values()) + TRANSFER
    return [StepRecord(rank=r, local_rank=r % 4, world=world, host=f"h{r // 4}", pid=pid + r, first=index * N,
                       last=index * N + N - 1, n=N, t0=1000.0 + index, t1=1001.0 + index,
                       step_s=Stats(step * N, step, step), compute_s=Stats(c * N, c, c),
                       wait_s=Stats((step - c) * N, step - c, step - c), gpu=r % 4, bus=f"0000:{r % 4 + 16:02x}:00.0")
            for r, c in compute.items()]


def _job(world: int, windows: int, slow: dict[int, float] | None = None, noise: float = 0.0, start: int = 0,
         seed: int = 1, ranks: list[int] | None = None) -> list[StepRecord]:
    rng = random.Random(seed)
    records = []
    for w in range(windows):
        compute = {r: 0.100 + rng.gauss(0, noise) for r in (ranks if ranks is not None else range(world))}
        for rank, extra in (slow or {}).items():
            if w >= start and rank in compute:
                compute[rank] += extra
        records += _window(world, w, compute)
    return records


NODES = {r: f"node-{r // 4}" for r in range(16)}


def test_noise_alone_names_no_straggler():
    report = find_stragglers(_job(8, 12, noise=0.004), NODES)
    assert report.outcome == "none" and not report.stragglers and report.windows == 12
    assert report.reason.startswith("no straggler")


def test_one_straggler_is_named_with_its_node_gpu_and_the_time_lost():
    report = find_stragglers(_job(8, 12, slow={5: 0.030}), NODES)
    assert report.outcome == "straggler" and [s.rank for s in report.stragglers] == [5]
    s = report.stragglers[0]
    assert (s.node, s.host, s.gpu, s.bus) == ("node-1", "h1", 1, "0000:11:00.0")
    assert (s.flagged, s.judged, s.since_step) == (10, 10, 100)  # the last 10 windows are judged
    assert s.compute_s == pytest.approx(0.130) and s.center_s == pytest.approx(0.100)
    assert s.wait_s == pytest.approx(TRANSFER) and s.wait_center_s == pytest.approx(0.030 + TRANSFER)
    assert report.lost_s == pytest.approx(10 * N * 0.030) and s.lost_s == pytest.approx(report.lost_s)
    assert report.lost_fraction == pytest.approx(0.030 / 0.135)
    assert "rank 5 on node-1 cuda:1 (0000:11:00.0)" in s.describe()


def test_two_stragglers_are_both_named_and_the_job_loses_the_larger_excess():
    report = find_stragglers(_job(12, 10, slow={2: 0.020, 9: 0.040}, noise=0.002), NODES)
    assert [s.rank for s in report.stragglers] == [2, 9]
    assert [s.node for s in report.stragglers] == ["node-0", "node-2"]
    assert report.lost_s == pytest.approx(10 * N * 0.040, rel=0.1)  # the ranks wait for the slower one only


def test_a_node_whose_ranks_all_compute_longer_names_each_of_them():
    report = find_stragglers(_job(16, 6, slow={4: 0.05, 5: 0.05, 6: 0.05, 7: 0.05}, noise=0.001), NODES)
    assert [s.rank for s in report.stragglers] == [4, 5, 6, 7] and {s.node for s in report.stragglers} == {"node-1"}


def test_missing_ranks_are_said_and_the_others_still_judged():
    report = find_stragglers(_job(8, 6, slow={6: 0.03}, ranks=[0, 1, 2, 4, 5, 6, 7]), NODES)
    assert [s.rank for s in report.stragglers] == [6]
    assert any("rank(s) 3 missing" in note for note in report.notes)


def test_one_window_is_no_verdict():
    report = find_stragglers(_job(8, 1, slow={5: 0.5}), NODES)
    assert report.outcome == "not judged" and "needs 3" in report.reason and not report.stragglers


def test_two_ranks_cannot_name_an_outlier():
    report = find_stragglers(_job(2, 10, slow={1: 0.05}), NODES)
    assert report.outcome == "not judged" and report.windows == 0 and "0 window(s) with 3 or more" in report.reason
    assert len(report.timeline) == 20  # still drawn


def test_a_spike_in_one_window_is_no_straggler():
    records = _job(8, 10) + _window(8, 10, {r: 0.1 + (0.2 if r == 3 else 0) for r in range(8)})
    assert find_stragglers(records, NODES).outcome == "none"


def test_a_difference_under_the_floor_is_no_straggler():
    assert find_stragglers(_job(8, 10, slow={4: 0.002}), NODES).outcome == "none"  # 2 ms of a 105 ms step


def test_a_late_straggler_is_judged_on_the_recent_windows_and_against_its_own_history():
    report = find_stragglers(_job(8, 20, slow={3: 0.040}, start=13, noise=0.001), NODES)
    (s,) = report.stragglers
    assert (s.rank, s.since_step, s.flagged, s.judged) == (3, 13 * N, 7, 10)
    assert s.own_history == pytest.approx(1.4, rel=0.05)


def test_without_any_wait_measured_nothing_is_judged():
    records = [StepRecord(**{**r.__dict__, "wait_s": Stats(0.0, 0.0, 0.0)}) for r in _job(8, 5, slow={1: 0.05})]
    report = find_stragglers(records, NODES)
    assert report.outcome == "not judged" and "no rank measured any collective wait" in report.reason


def test_only_a_restarted_ranks_new_process_counts():
    old = [r for r in _job(8, 6, slow={5: 0.05}) if r.rank == 5]
    new = [StepRecord(**{**r.__dict__, "pid": 9999, "t0": r.t0 + 100, "t1": r.t1 + 100}) for r in _job(8, 6)
           if r.rank == 5]
    others = [r for r in _job(8, 6) if r.rank != 5]
    assert find_stragglers(old + new + others, NODES).outcome == "none"


def test_non_finite_figures_judge_nothing():
    records = _job(8, 5, slow={1: 0.05})
    broken = [StepRecord(**{**r.__dict__, "compute_s": Stats(float("nan"), float("nan"), 0.1)}) for r in records]
    report = find_stragglers(broken, NODES)
    assert report.outcome == "not judged" and "no step records" in report.reason


def test_without_attribution_the_rank_is_placed_by_its_own_claim():
    (s,) = find_stragglers(_job(8, 5, slow={6: 0.05})).stragglers
    assert s.node is None and "h1 (as the process says)" in s.describe()


def test_a_real_job_names_its_slow_rank(tmp_path):
    """3 gloo ranks forked from one import of torch with torchrun's environment (tests/helpers/forked_ranks.py), DDP
    with the timer attached; rank 2 sleeps 150 ms a step in its compute. With 40 ms, a full run's load once left it
    flagged in only 3 of the last 6 windows: the other ranks' compute swung by tens of milliseconds on the 2 shared
    cores."""
    done = subprocess.run(forked_ranks.command(3, SCRIPT, "ddp", "24", "4", "150"), capture_output=True, text=True,
                          env=job_env(tmp_path / "state"), timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    found = read_job_records(("this-node", line) for line in done.stderr.splitlines())
    report = find_stragglers(found.records, found.node_of)
    assert report.outcome == "straggler", (report.reason, report.timeline)
    assert [(s.rank, s.node) for s in report.stragglers] == [(2, "this-node")]
    assert report.stragglers[0].compute_s - report.stragglers[0].center_s > 0.03
