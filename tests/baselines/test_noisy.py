"""A mean with its noise against a band (baselines.noisy.judge_mean): the band's own verdict once the noise cannot
change it, WARN "not sure" while it straddles a limit, and a warn limit never made a fail limit."""

from __future__ import annotations

import math

import pytest

from gpuval.baselines import Band, load_baseline
from gpuval.baselines.noisy import judge_mean
from gpuval.results import Status

BAND = Band("allreduce_busbw_gbps", "GB/s", 234.0, "seed", warn_below=230.0, fail_below=228.0)


@pytest.mark.parametrize("mean", [227.996, 228.0, 228.004, 229.996, 230.0, 230.004, 100.0, 300.0])
def test_without_noise_it_is_the_band_itself(mean: float):
    judged = judge_mean(BAND, mean, 0.0)
    assert judged.status is BAND.judge(mean).status and judged.sure


def test_the_noise_decides_how_sure():
    assert judge_mean(BAND, 220.0, 1.0).status is Status.FAIL  # 3.5 se still under 228
    assert judge_mean(BAND, 226.0, 1.0).status is Status.WARN  # could be 229.5: not sure
    assert not judge_mean(BAND, 226.0, 1.0).sure and "not sure" in judge_mean(BAND, 226.0, 1.0).reason
    assert judge_mean(BAND, 233.0, 1.0).status is Status.PASS  # 2 se still over 230
    assert judge_mean(BAND, 231.0, 1.0).status is Status.WARN  # could be 229: not sure
    assert judge_mean(BAND, 229.0, 0.2).status is Status.WARN and judge_mean(BAND, 229.0, 0.2).sure  # in the warn zone
    assert judge_mean(BAND, 229.0, math.nan).status is Status.WARN  # unknown noise: never sure


def test_a_warn_limit_is_never_a_fail_limit():
    warn_only = Band("allreduce_busbw_multinode_gbps", "GB/s", 450.0, warn_below=400.0)
    assert judge_mean(warn_only, 100.0, 0.0).status is Status.WARN
    assert judge_mean(warn_only, 100.0, 1.0).status is Status.WARN
    base = load_baseline("Standard_ND96isr_H100_v5")
    band = base.band("allreduce_busbw_multinode_gbps")
    assert judge_mean(band, 390.0, 0.0).status is Status.WARN and judge_mean(band, 379.0, 0.0).status is Status.FAIL
