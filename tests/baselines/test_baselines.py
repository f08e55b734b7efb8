"""Baselines as data: every packaged figure with its source, the judge's API, a user's file that inherits a SKU,
bad files as one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval.baselines import NoBaseline, find_baseline, load_baseline, packaged_skus
from gpuval.errors import UsageError
from gpuval.results.model import Status


def test_published_minimums_warn_and_fail_a_noise_band_below():
    """No bandwidth band fails at its expected figure: a healthy node a little under it warns, never fails."""
    for sku in packaged_skus():
        for band in load_baseline(sku).bands.values():
            if band.unit == "GB/s" and band.fail_below is not None:
                assert band.fail_below < band.expected, (sku, band.name)
                assert band.warn_below is not None and band.fail_below < band.warn_below <= band.expected
    h100 = load_baseline("Standard_ND96isr_H100_v5")
    assert h100.judge("allreduce_busbw_gbps", 455).status is Status.WARN
    assert h100.judge("allreduce_busbw_gbps", 436).status is Status.FAIL
    assert h100.band("allreduce_busbw_gbps").fail_source.startswith("gpuval policy: 5% under")
    assert load_baseline("Standard_ND96isr_H200_v5").judge("allreduce_busbw_gbps", 420).status is Status.WARN
    assert load_baseline("Standard_ND40rs_v2").judge("h2d_gbps", 8.7).status is Status.WARN


def test_packaged_baselines_carry_sources():
    assert packaged_skus() == ["Standard_ND40rs_v2", "Standard_ND96amsr_A100_v4", "Standard_ND96asr_v4",
                               "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"]
    for sku in packaged_skus():
        base = load_baseline(sku)
        for band in base.bands.values():
            assert band.expected is not None and band.expected_source, (sku, band.name)
            if band.fail_below is not None or band.fail_above is not None:
                assert band.fail_source, (sku, band.name)
            if band.warn_below is not None or band.warn_above is not None:
                assert band.warn_source, (sku, band.name)
    assert load_baseline("nd96ISR_h100_v5").sku == "Standard_ND96isr_H100_v5"


def test_judge_api():
    base = load_baseline("Standard_ND96asr_v4")
    assert base.judge("allreduce_busbw_gbps", 236).status is Status.PASS
    assert base.judge("allreduce_busbw_gbps", 229).status is Status.WARN
    fail = base.judge("allreduce_busbw_gbps", 200)
    assert fail.status is Status.FAIL and fail.expected == 234 and "azurehpc-health-checks" in fail.reason
    assert base.judge("no_such_metric", 1).status is Status.SKIPPED


def test_fewer_gpus_than_the_family_is_data(tmp_path: Path):
    mine = tmp_path / "half.yaml"
    mine.write_text("sku: Standard_ND96asr_v4_half\ninherits: Standard_ND96asr_v4\nmetrics:\n"
                    "  gpu_count: {expected: 4, fail_below: 4, expected_source: our partition, fail_source: a missing GPU}\n")
    base = load_baseline("Standard_ND96asr_v4_half", [mine])
    assert base.judge("gpu_count", 4).status is Status.PASS
    assert base.band("nvlinks_per_gpu").expected == 12  # the rest comes from the family
    assert find_baseline(None, [mine]).sku == "Standard_ND96asr_v4_half"
    override = tmp_path / "override.yaml"
    override.write_text("sku: Standard_ND96isr_H100_v5\nmetrics:\n  nvlinks_per_gpu: {expected: 16, fail_below: 16, "
                        "expected_source: our boards, fail_source: a link down}\n")
    assert load_baseline("Standard_ND96isr_H100_v5", [override]).judge("nvlinks_per_gpu", 16).status is Status.PASS


def test_bad_baseline_files_are_one_line_errors(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: {}\n")
    with pytest.raises(UsageError, match="needs 'sku"):
        load_baseline("Standard_ND96asr_v4", [bad])
    bad.write_text("sku: X\ninherits: Standard_NC6\n")
    with pytest.raises(UsageError, match="inherits 'Standard_NC6'"):
        load_baseline("X", [bad])
    bad.write_text("sku: X\ninherits: Standard_ND96asr_v4\nmetrics:\n  gpu_count: {expected: eight, expected_source: ours}\n")
    with pytest.raises(UsageError, match="must be numbers"):
        load_baseline("X", [bad])
    with pytest.raises(NoBaseline):
        load_baseline("Standard_D4s_v5")
