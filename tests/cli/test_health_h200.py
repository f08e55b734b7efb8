"""The real H200 VM run as recorded machines, through the CLI: healthy and idle it passes with no
SKU; while another process ran GEMMs on it, its measuring checks are GPU_BUSY errors, never a hardware fault."""

from __future__ import annotations

import json

from tests.conftest import run_gpuval

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}
MINE = ("temperature", "firmware", "gpu_mode", "cuda_init", "row_remap", "clock_throttle")


def test_the_idle_h200_passes_with_no_sku():
    proc = run_gpuval("health", "--recorded", "h200-vm", "--json", env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert not [n for n, r in rows.items() if r["status"] in ("fail", "error", "warn")], rows
    assert all(rows[n]["status"] == "pass" for n in MINE)
    assert "virtualization: PCI pass-through (a VM)" in rows["gpu_mode"]["reason"]
    # measured and judged by its GPU model (H200 SXM: memcpy and triad bands); the figure shown is the triad
    assert rows["hbm_bandwidth"]["status"] == "pass" and rows["hbm_bandwidth"]["data"]["value"] == 4383


def test_the_busy_h200_is_busy_not_broken():
    proc = run_gpuval("health", "--recorded", "h200-vm-busy", "--json", env=NO_IMDS)
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    busy = [n for n, r in rows.items() if r["data"]["fault_code"] == "GPU_BUSY"]
    assert busy == ["h2d_d2h_bandwidth", "gemm_tflops", "hbm_bandwidth", "gemm_sustained", "clocks_under_load"]
    # one GPU: no all_reduce between GPUs to measure, so nothing a busy GPU could spoil: skipped with that reason
    allreduce = rows["nccl_allreduce_node"]
    assert allreduce["status"] == "skipped" and allreduce["reason"].startswith("one GPU: no all_reduce between GPUs")
    assert all(rows[n]["status"] == "error" and "pid 1255 python3 (1002 MiB)" in rows[n]["reason"] for n in busy)
    assert not [n for n, r in rows.items() if r["status"] == "fail"]  # no HBM_SLOW, no GEMM_SUSTAINED_SLOW
    proc = run_gpuval("health", "--recorded", "h200-vm-busy", "--check", "hbm_bandwidth", "--allow-busy",
                      env=NO_IMDS)
    assert "reported, not judged (--allow-busy)" in proc.stdout and "2181 GB/s" in proc.stdout


def test_burn_on_the_busy_h200_is_an_error_exit_2():
    proc = run_gpuval("burn", "--recorded", "h200-vm-busy", "--duration", "10s", env=NO_IMDS)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "GPU_BUSY" in proc.stdout and "pid 1255 python3" in proc.stdout
    proc = run_gpuval("burn", "--recorded", "h200-vm", "--duration", "10s", env=NO_IMDS)
    assert proc.returncode == 0 and "PASS" in proc.stdout
