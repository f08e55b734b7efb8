"""`gpuval validate` as a user runs it on this machine (CPU: gloo ranks, every GPU check skipped): health, sweep,
verdict, report, and the JSON answer."""

from __future__ import annotations

import json
from pathlib import Path

from gpuval.results import read_results
from tests.conftest import run_gpuval

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def test_validate_runs_health_and_sweep(results_file: Path):
    proc = run_gpuval("validate", "-e", "64K", "--results", str(results_file), env=NO_IMDS, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpuval health" in proc.stdout and "PASS all_reduce" in proc.stdout
    assert "no baseline for SKU unknown" in proc.stdout
    kinds = {r.kind for r in read_results(results_file)}
    assert kinds == {"health", "collective"}
    report = Path(proc.stdout.split("report: ", 1)[1].split()[0])
    assert report.is_file() and "all_reduce" in report.read_text()


def test_validate_json(tmp_path: Path, results_file: Path):
    target = tmp_path / "r.html"
    proc = run_gpuval("validate", "-e", "64K", "--json", "--report", str(target), "--results", str(results_file),
                      env=NO_IMDS, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # nothing but the JSON object on stdout
    # the verdict is a Status with its reason ("status", "reason"; once "verdict", "basis")
    assert out["status"] == "pass" and out["report"] == str(target) and target.is_file()
    assert "only the collective's data was checked" in out["reason"]
    assert out["sweep"]["largest_size"] == 65536 and out["sweep"]["wrong_elements"] == 0
    assert {c["name"] for c in out["health"]} >= {"gpu_count", "nccl_transport", "ib_ports"}
    assert {r.run_id for r in read_results(results_file)} == {out["run_id"]}


def test_validate_on_one_rank_is_a_smoke_test_and_passes(results_file: Path):
    """One rank (gloo here, NCCL on a one-GPU node): busbw is 0 by definition, the sweep is a smoke test (it starts,
    its data is exact), never judged by busbw; the verdict follows the checks (was ERROR "peak busbw 0.00")."""
    proc = run_gpuval("validate", "--nprocs", "1", "-e", "64K", "--results", str(results_file), env=NO_IMDS,
                      timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one rank, a smoke test" in proc.stdout and "all_reduce on one rank (a smoke test): 14 sizes" in proc.stdout
    assert "peak busbw" not in proc.stdout and "0 wrong elements" in proc.stdout
    assert "verdict: one rank: a smoke test of the collective library" in proc.stdout
