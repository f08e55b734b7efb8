"""`gpuval burn` as a user runs it (real processes): on this machine (no GPU: skipped with the reason), on a
recording (judged on its figures: a slow GPU fails it, exit 1), bad input (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuval.node.recorded import recorded_data
from gpuval.results import read_results
from tests.conftest import run_gpuval

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def test_burn_on_this_machine_is_skipped_with_the_reason():
    proc = run_gpuval("burn", "--duration", "2s", "--json", env=NO_IMDS)
    assert proc.returncode == 2, proc.stderr  # skipped: nothing judged, never a pass
    record = json.loads(proc.stdout)
    assert (record["kind"], record["name"], record["status"]) == ("health", "burn", "skipped")
    assert "no NVIDIA driver" in record["reason"]


def test_burn_on_a_recording_fails_the_slow_gpu_and_saves_one_health_record(tmp_path: Path, results_file: Path):
    data = recorded_data("Standard_ND96isr_H100_v5")
    data["measurements"]["gemm_sustained_bf16_tflops_all"] = [730, 730, 730, 730, 600, 730, 730, 730]
    node = tmp_path / "node.yaml"
    node.write_text(yaml.safe_dump(data))
    proc = run_gpuval("burn", "--recorded", str(node), "--duration", "1m", "--results", str(results_file),
                      env=NO_IMDS)
    assert proc.returncode == 1, proc.stderr
    assert "GPU_BURN_FAILED" in proc.stdout and "GPU 4 (00000009:00:00.0)" in proc.stdout
    [record] = read_results(results_file)
    assert (record.kind, record.name, record.status.value) == ("health", "burn", "fail")
    assert record.params["seconds"] == 60 and record.where.sku == "Standard_ND96isr_H100_v5"
    assert record.data.fault_code == "GPU_BURN_FAILED" and record.metrics[0].value == 600


def test_burn_bad_duration_is_one_line_exit_2():
    proc = run_gpuval("burn", "--duration", "soon", env=NO_IMDS)
    assert proc.returncode == 2 and "--duration 'soon'" in proc.stderr and "Traceback" not in proc.stderr
