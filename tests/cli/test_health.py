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


def test_health_on_this_machine_skips_gpu_checks_and_exits_2(results_file: Path):
    """No GPU, no HCA: every check is skipped, nothing is judged; the one node verdict is SKIPPED, exit 2 (never a
    pass: a Slurm or CI gate must not read "nothing judged" as healthy)."""
    proc = run_gpuval("health", "--json", "--results", str(results_file), env=NO_IMDS)
    assert proc.returncode == 2, proc.stderr
    rows = json.loads(proc.stdout)  # --json prints the checks' Result records, as the health job reads them
    assert [r["name"] for r in rows] == ORDER  # every check, each skipped here with its reason
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
    assert proc.returncode == 2, proc.stderr  # both skipped here: nothing judged
    assert "ecc" in proc.stdout and "ib_ports" in proc.stdout and "gpu_count" not in proc.stdout
    assert "verdict: SKIPPED: nothing was judged" in proc.stdout and "(exit 2)" in proc.stdout


def test_health_exits_by_the_one_node_verdict(tmp_path: Path):
    """The SKU's HCAs not visible in a container: "1 error, 1 skipped" exits 2 (it exited 0); one judged pass exits
    0. (A fail beside an error exits 1: tests/results/test_one_verdict.py.)"""
    data = recorded_data("Standard_ND96isr_H100_v5")
    data["ib_ports"], data["container_markers"] = [], ["/.dockerenv (root file system overlay)"]
    hidden = tmp_path / "in-a-container.yaml"
    hidden.write_text(yaml.safe_dump(data))
    proc = run_gpuval("health", "--recorded", str(hidden), "--check", "ib_ports", "--check", "dcgm_diag", env=NO_IMDS)
    assert proc.returncode == 2 and "1 error, 1 skipped" in proc.stdout, proc.stdout
    assert "verdict: ERROR: could not run: ib_ports" in proc.stdout
    proc = run_gpuval("health", "--recorded", "Standard_ND96isr_H100_v5", "--check", "gpu_count", "--check",
                      "dcgm_diag", env=NO_IMDS)
    assert proc.returncode == 0 and "verdict: PASS: 1 judged" in proc.stdout, proc.stdout


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


def test_a_lost_gpu_fails_by_bus_id_and_everything_else_is_still_judged(tmp_path: Path):
    """Item 1 end to end: a recorded ND96asr_v4 whose GPU 3 fell off the bus (Xid 79, NVML: GPU is lost). gpu_count
    fails naming its PCI bus id; every other check still judges the seven GPUs that answer (the measuring ones on
    their recorded figures, saying GPU 3 was not measured) and the fabric; the exit code is 1 (a failed check),
    never 2 (could not run)."""
    data = recorded_data("Standard_ND96asr_v4")
    data["gpus"][3] = {"index": 3, "lost": True, "pci_bus_id": "00000004:00:00.0", "name": "NVIDIA A100-SXM4-40GB"}
    data["kernel_log"].append("NVRM: Xid (PCI:0004:00:00): 79, pid=0, GPU has fallen off the bus.")
    lost = tmp_path / "lost.yaml"
    lost.write_text(yaml.safe_dump(data))
    proc = run_gpuval("health", "--recorded", str(lost), "--json", env=NO_IMDS)
    assert proc.returncode == 1, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["gpu_count"]["status"] == "fail" and "GPU 3 at PCI 00000004:00:00.0" in rows["gpu_count"]["reason"]
    assert rows["xid"]["status"] == "fail" and "79" in rows["xid"]["reason"]
    assert rows["ecc"]["status"] == "pass" and "7 GPUs" in rows["ecc"]["reason"]
    for name in ("h2d_d2h_bandwidth", "gemm_tflops", "hbm_bandwidth", "nccl_allreduce_node"):
        # an A100's burst and HBM figures have no band of gpuval's own measurement: the floor and the peers judge them
        assert rows[name]["status"] == "pass", rows[name]
        assert "GPU 3 (00000004:00:00.0) lost: not measured" in rows[name]["reason"]
    assert "over 7 GPUs" in rows["nccl_allreduce_node"]["reason"]
    assert rows["ib_ports"]["status"] == "pass" and rows["topology"]["status"] == "pass"
    assert not [r for r in rows.values() if r["status"] == "error"]
