"""Broken or hostile input to the one judge: a limit that is no finite number is refused when its file is read, a
figure that is none judges nothing (ERROR, never PASS), and a user's file cannot stall a command (YAML aliases and
unknown top-level keys are refused; Baseline.key is built from the bands, never from the file as read)."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from gpuval.baselines import Band, Baseline, NotFinite, baseline_source, load_baseline
from gpuval.baselines.noisy import judge_mean
from gpuval.checks.base import REGISTRY
from gpuval.errors import UsageError
from gpuval.node.recorded import recorded_data
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.health_support import H100, context, gpu, no_imds  # noqa: F401

H200_VM = "h200-vm"  # the packaged recording of gpuval's run on one H200 SXM VM, 2026-11-26
NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def _file(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _recording(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The packaged H100 recording with `change` applied, as a file `--recorded` reads."""
    data = copy.deepcopy(recorded_data(H100))
    change(data)
    return _file(tmp_path, yaml.safe_dump(data), "recording.yaml")


# ---- limits that are no finite number ------------------------------------------------------------------------------

@pytest.mark.parametrize("metric, band", [
    ("ecc_volatile_uncorrected", "{fail_above: nan, fail_source: typo}"),  # a plain YAML word, read as float('nan')
    ("ib_rate_gbps", "{fail_below: .inf, fail_source: typo}"),  # failed every port: 3 of 3 nodes drained
    ("allreduce_busbw_gbps", "{expected: .nan, expected_source: typo}"),
    ("h2d_gbps", "{warn_below: -.inf, warn_source: typo}"),
])
def test_a_limit_that_is_no_finite_number_is_refused_when_the_file_is_read(tmp_path: Path, metric: str, band: str):
    path = _file(tmp_path, f"sku: Standard_ND96isr_H100_v5\nmetrics:\n  {metric}: {band}\n")
    with pytest.raises(UsageError, match=f"metric {metric}: .* is not a finite number"):
        baseline_source([path])  # read and checked here, before any SKU is asked for


def test_ecc_with_a_nan_limit_is_refused_where_the_packaged_baseline_fails(tmp_path: Path):
    """A node with 7 uncorrectable ECC errors on GPU 3 passed with `fail_above: nan` (NaN compares false): now the
    file is refused (one line, exit 2), and the packaged baseline still fails the node."""
    recording = _recording(tmp_path, gpu(3, ecc={"volatile_uncorrected": 7}))
    packaged = run_gpuval("health", "--recorded", str(recording), "--check", "ecc", "--json", env=NO_IMDS)
    assert packaged.returncode == 1 and json.loads(packaged.stdout)[0]["status"] == "fail", packaged.stderr
    nan = _file(tmp_path, "sku: Standard_ND96isr_H100_v5\nmetrics:\n"
                          "  ecc_volatile_uncorrected: {fail_above: nan, fail_source: typo}\n", "nan.yaml")
    proc = run_gpuval("health", "--recorded", str(recording), "--baseline", str(nan), "--check", "ecc", env=NO_IMDS)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "is not a finite number" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "pass" not in proc.stdout


# ---- figures that are no finite number ----------------------------------------------------------------------------

def test_the_one_judge_gives_error_for_a_figure_that_is_no_number():
    band = load_baseline("Standard_ND96asr_v4").band("allreduce_busbw_gbps")
    for figure in (math.nan, math.inf, -math.inf):
        assert band.judge(figure).status is Status.ERROR and "not a finite figure" in band.judge(figure).reason
        assert judge_mean(band, figure, 1.0).status is Status.ERROR
        with pytest.raises(NotFinite):
            load_baseline("Standard_ND96asr_v4").judge("allreduce_busbw_gbps", figure)
    warn_only = Band("x", warn_below=1.0)
    assert judge_mean(warn_only, 2.0, math.nan).status is Status.WARN  # unknown noise: not sure, never an error


@pytest.mark.parametrize("check, change", [
    ("gemm_tflops", lambda d: d["measurements"].update(gemm_bf16_tflops=math.nan, gemm_fp16_tflops=math.nan)),
    ("hbm_bandwidth", lambda d: d["measurements"].update(hbm_triad_gbps=math.nan)),
    ("ecc", gpu(0, ecc={"volatile_uncorrected": math.nan})),
])
def test_a_recorded_figure_that_is_no_number_is_error_never_pass(check: str, change: Callable[[dict], None]):
    """Recordings with `.nan` figures passed (`PASS gemm_tflops nan TFLOPS`, `PASS hbm_bandwidth nan GB/s`), on
    the H200 of gpuval's run, whose GPU model has bands for both."""
    result = REGISTRY[check].run(context(H200_VM, change))
    assert result.status is Status.ERROR and "not a finite figure" in result.reason, result.reason


# ---- files that would stall a command -------------------------------------------------------------------------------

def _alias_bomb() -> str:
    """Nine levels of ten aliases under an unknown top-level key: 10^9 values once walked, a few hundred bytes."""
    levels = ["  l0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"  l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "sku: Standard_ND96isr_H100_v5\nmetrics: {}\npadding:\n" + "\n".join(levels) + "\n"


def test_an_alias_bomb_in_a_baseline_file_is_refused_in_seconds(tmp_path: Path):
    """`health --baseline bomb.yaml` printed its first check, then ran out of time and memory in Baseline.key."""
    bomb = _file(tmp_path, _alias_bomb(), "bomb.yaml")
    assert len(bomb.read_bytes()) < 600
    proc = run_gpuval("health", "--recorded", H100, "--baseline", str(bomb), "--check", "ecc", env=NO_IMDS,
                      timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "YAML aliases" in lines[0], proc.stderr


def test_unknown_top_level_keys_in_a_baseline_file_are_refused(tmp_path: Path):
    path = _file(tmp_path, "sku: Standard_ND96isr_H100_v5\nmetrics: {}\npadding: [1, 2]\n")
    with pytest.raises(UsageError, match="unknown key.s. padding"):
        baseline_source([path])


def test_the_key_is_built_from_the_bands_not_the_file_as_read():
    """A baseline whose file held shared references (10^9 values if walked): its key takes no time."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(_alias_bomb(), Loader=loader)  # noqa: S506 (a safe loader)
    base = Baseline(sku="bomb", bands=dict(load_baseline(H100).bands), raw=raw)
    start = time.monotonic()
    key = base.key
    assert time.monotonic() - start < 5 and key.startswith("bomb|no GPU model|")
    assert key != Baseline(sku="bomb", bands={}, raw=raw).key  # every band counts
