"""`gpuval health`, `topo`, `tune` and `validate` as a user runs them (real processes, this machine or a recording)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuval.checks.suite import ORDER
from gpuval.node.recorded import recorded_data
from gpuval.results import read_results
from tests.conftest import run_gpuval

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def test_health_on_this_machine_skips_gpu_checks_and_exits_0(results_file: Path):
    proc = run_gpuval("health", "--json", "--results", str(results_file), env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)  # issue 9: --json prints the checks' Result records, as the health job reads them
    assert [r["name"] for r in rows] == ORDER  # issue 14's checks too, each skipped with its reason
    assert set(rows[0]) >= {"name", "status", "reason", "where", "data"}
    assert set(rows[0]["data"]) >= {"fault_code", "value", "expected", "unit"}
    assert all(r["status"] == "skipped" and r["reason"] for r in rows)
    assert "no NVIDIA driver" in rows[0]["reason"]
    records = read_results(results_file)
    assert [r.name for r in records] == [r["name"] for r in rows]
    assert [r.id for r in records] == [r["id"] for r in rows]  # the same records, printed and saved
    assert all(r.kind == "health" and r.data.fault_code for r in records)


def test_health_subset_and_table():
    proc = run_gpuval("health", "--check", "ib_ports", "--check", "ecc", env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    assert "ecc" in proc.stdout and "ib_ports" in proc.stdout and "gpu_count" not in proc.stdout


def test_health_on_a_recorded_node_with_a_fault_exits_1(tmp_path: Path, results_file: Path):
    data = recorded_data("Standard_ND96asr_v4")
    data["gpus"][3]["ecc"] = {"volatile_uncorrected": 4}
    broken = tmp_path / "node.yaml"
    broken.write_text(yaml.safe_dump(data))
    proc = run_gpuval("health", "--recorded", str(broken), "--json", "--results", str(results_file), env=NO_IMDS)
    assert proc.returncode == 1, proc.stderr
    ecc = next(r for r in json.loads(proc.stdout) if r["name"] == "ecc")
    assert ecc["status"] == "fail" and ecc["data"]["fault_code"] == "ECC_ERRORS" and "GPU 3" in ecc["reason"]
    record = next(r for r in read_results(results_file) if r.name == "ecc")
    assert record.where.sku == "Standard_ND96asr_v4"
    assert record.where.gpu_model == "NVIDIA A100-SXM4-40GB" and record.where.gpu_count == 8


def test_health_bad_input_exits_2_with_one_line():
    proc = run_gpuval("health", "--check", "gpu_cnt", env=NO_IMDS)
    assert proc.returncode == 2 and "unknown check 'gpu_cnt'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gpuval("health", "--recorded", "Standard_NC6", env=NO_IMDS)
    assert proc.returncode == 2 and "no recorded machine" in proc.stderr
