"""The GPU check's parts that run anywhere: scripts/gpu-check.sh keeps going when steps fail (here every GPU step
fails: no GPU) and still writes its report; the report reads gpuval's and torch's figures from the steps' outputs;
benchmarks/bench_vs_nccltests.py judges rows by the issue's targets (+1 us at <= 1 MiB, 2 % at >= 64 MiB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_vs_nccltests import table, verdict
from gpuval.collectives.table import Row, Side

ROOT = Path(__file__).resolve().parents[2]


def _row(size: int, oop: float | None, inp: float) -> Row:
    side = (lambda t: None if t is None else Side(t, 0.0, 0.0, 0))
    return Row(size, size // 4, "float", "sum", -1, side(oop), side(inp))


def test_rows_are_judged_by_the_issue_targets():
    assert verdict(8, 4.92, 5.49) == "met" and verdict(1 << 20, 5.50, 6.51) == "MISSED"
    assert verdict(256 << 20, 129.66, 128.37) == "met" and verdict(1 << 30, 508.57, 519.0) == "MISSED"
    assert verdict(1 << 30, 0.38, 0.91) == "met" and verdict(1 << 30, 0.38, 1.5) == "MISSED"  # the 1 us floor
    assert verdict(16 << 20, 11.20, 6.71) == ""  # between 1 MiB and 64 MiB: reported, not judged
    assert verdict(8, 4.92, None) == ""  # a side the path does not have
    lines, missed = table([_row(8, 4.92, 0.28), _row(1 << 30, 508.57, 0.38)],
                          [_row(8, 5.49, 0.88), _row(1 << 30, 503.41, 0.91)], [_row(8, None, 14.8)])
    assert missed == 0 and lines[2] == "| 8 | 4.92 | 5.49 | met | 0.28 | 0.88 | met | N/A / 14.80 |"
    assert "| 1G | 508.57 | 503.41 | met | 0.38 | 0.91 | met |" in lines[3]


def test_the_check_keeps_going_past_failed_steps_and_writes_its_report(tmp_path):
    """No GPU here: nvidia-smi, the torch reference, the nccl-tests build and the bench fail, gpuval's commands are
    a stand-in that fails at once; every step is still run, timed and listed, and the report is written."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$2" = gpuval ] && {{ echo "gpuval $*: no GPU"; exit 2; }}\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), str(out), str(tmp_path / "no-source")],
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "NCCL_TESTS_BUILD": str(tmp_path / "b")},
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [s[0] for s in steps if s[0] != "nccl-tests-build"] == [  # the build runs in the background meanwhile
        "env", "nvml-probe", "reference", "burn", "validate", "health", "health-2", "burst-order", "bench",
        "collectives", "busy", "burn-busy", "pidns-idle", "pidns-busy", "pidns-pausing", "cuda-stale-mig",
        "cuda-stale-gpu", "cuda-index", "hidden", "health-sku", "report"]
    assert all(code != "0" for name, code, *_ in steps if name not in ("env", "report"))  # env: informational
    report = (out / "gpu-validation.md").read_text()
    assert "| validate | 2 |" in report and "the bench step produced no table" in report
    assert "the NVML probe printed no JSON" in report and "the burst step printed no table" in report


def test_the_check_scripts_parse():
    """bash -n on the shell scripts, a compile of the Python ones: a syntax error is caught here, not on a lent GPU."""
    for script in ("gpu-check.sh", "gpu-check-prepare.sh"):
        got = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
    for script in ("gpu-check-nvml-probe.py", "gpu-check-burst.py", "gpu-check-load.py", "gpu-check-report.py",
                   "gpu-check-reference.py"):
        compile((ROOT / "scripts" / script).read_text(), script, "exec")


def test_the_report_reads_gpuval_and_torch_figures(tmp_path):
    (tmp_path / "env.txt").write_text("    Product Name                          : NVIDIA H200\n"
                                      "Driver Version                            : 580.159.04\n"
                                      "CUDA Version                              : 13.0\n"
                                      "torch 2.11.0+cu130 cuda 13.0 nccl (2, 28, 9) gpuval 0.1.0\n"
                                      "NCCL 2.28.9 called directly by nccl4py's bindings (GPU ranks)\n")
    (tmp_path / "reference.txt").write_text(json.dumps({"d2d_copy_GBps_rw": 4181.9, "h2d_pinned_GBps": 55.45,
                                                        "d2h_pinned_GBps": 55.31, "gemm_bf16_8192_TFLOPS": 754.4}))
    (tmp_path / "health.txt").write_text(
        "  PASS    hbm_bandwidth        HBM_SLOW           4205.11 GB/s  slowest memcpy 4205 GB/s (GPU 0)\n"
        "  PASS    h2d_d2h_bandwidth    H2D_D2H_SLOW       55.5 GB/s  slowest H2D 55.5 GB/s (GPU 0), D2H 55.3 GB/s\n")
    (tmp_path / "burn.txt").write_text("  PASS    burn    GPU_BURN_FAILED    668.512 TFLOPS  1 GPUs at once, bf16 GEMM "
                                       "20 s: 669-669 TFLOPS\n")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check-report.py"), str(tmp_path)], check=True,
                   capture_output=True)
    report = (tmp_path / "gpu-validation.md").read_text()
    assert "| device | NVIDIA H200 |" in report and "| driver | 580.159.04 |" in report
    assert "| bench path | NCCL 2.28.9 called directly by nccl4py's bindings (GPU ranks) |" in report
    assert "| HBM copy GB/s (read + write) | 4205 | 4181.9 |" in report
    assert "| H2D pinned GB/s | 55.5 | 55.5 |" in report and "| burn TFLOPS | 669 | - |" in report
