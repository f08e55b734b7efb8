"""`gpuval health`, `topo`, `tune` and `validate` as a user runs them (real processes, this machine or a recording)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuval.node.recorded import recorded_data
from gpuval.results import read_results
from tests.conftest import run_gpuval

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def test_health_on_this_machine_skips_gpu_checks_and_exits_0(results_file: Path):
    proc = run_gpuval("health", "--json", "--results", str(results_file), env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)  # issue 9: --json prints the checks' Result records, as the health job reads them
    assert len(rows) == 17
    assert set(rows[0]) >= {"name", "status", "reason", "where", "data"}
    assert set(rows[0]["data"]) >= {"fault_code", "value", "expected", "unit"}
    assert all(r["status"] == "skipped" for r in rows)
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


def test_topo_on_this_machine_and_a_recording():
    proc = run_gpuval("topo", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["numa_nodes"] and doc["gpus"] == [] and "no NVIDIA driver" in doc["gpu_note"]
    proc = run_gpuval("topo", "--recorded", "Standard_ND96asr_v4", "--json")
    gpus = json.loads(proc.stdout)["gpus"]
    assert [(g["gpu"], g["numa_node"], g["cpus"], g["nearest_nics"]) for g in gpus[:3]] == [
        (0, 1, "24-47", ["mlx5_ib0", "mlx5_ib1"]), (1, 1, "24-47", ["mlx5_ib0", "mlx5_ib1"]),
        (2, 0, "0-23", ["mlx5_ib2", "mlx5_ib3"])]


def test_tune_without_driver_is_one_line_exit_2():
    for args in (("tune", "clocks", "--list"), ("tune", "clocks", "--max"), ("tune", "persistence", "on")):
        proc = run_gpuval(*args)
        assert proc.returncode == 2, args
        assert "no NVIDIA driver" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gpuval("tune", "clocks", "--max", "--reset")
    assert proc.returncode == 2 and "exactly one of" in proc.stderr


def test_validate_runs_health_and_sweep(results_file: Path):
    proc = run_gpuval("validate", "-e", "1M", "--results", str(results_file), env=NO_IMDS, timeout=120)
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
    # issue 9: the verdict is a Status with its reason ("status", "reason"; was "verdict", "basis")
    assert out["status"] == "pass" and out["report"] == str(target) and target.is_file()
    assert "only the collective's data was checked" in out["reason"]
    assert out["sweep"]["largest_size"] == 65536 and out["sweep"]["wrong_elements"] == 0
    assert {c["name"] for c in out["health"]} >= {"gpu_count", "nccl_transport", "ib_ports"}
    assert {r.run_id for r in read_results(results_file)} == {out["run_id"]}
