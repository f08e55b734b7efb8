"""The GPU check's parts that run anywhere: scripts/gpu-check.sh keeps going when steps fail (here every GPU step
fails: no GPU) and still writes its report; the report reads gpuval's and torch's figures from the steps' outputs;
benchmarks/bench_vs_nccltests.py runs nccl-tests one GPU per thread or process (never -g N), -G against -G, and
judges the median of -N cycles by the targets (+1 us at <= 1 MiB, 2 % at >= 64 MiB). Its whole run is exercised
here with a stand-in for the nccl-tests binary (a script printing nccl-tests' table, recording its arguments) and
gpuval's real bench on CPU ranks, through the nccl4py stand-in and through torch.distributed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_vs_nccltests import Sweep, medians, nccl_tests_command, table, verdict
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
    lines, missed = table(medians([_row(8, 4.92, 0.28), _row(1 << 30, 508.57, 0.38)]),
                          medians([_row(8, 5.49, 0.88), _row(1 << 30, 503.41, 0.91)]), medians([_row(8, None, 14.8)]))
    assert missed == 0 and lines[2] == "| 8 | 4.92 | 5.49 | met | 0.28 | 0.88 | met | N/A / 14.80 |"
    assert "| 1G | 508.57 | 503.41 | met | 0.38 | 0.91 | met |" in lines[3]


def test_each_row_is_judged_by_the_median_of_its_cycles():
    """-N 3 gives three rows per size; one slow cycle (a noisy neighbour, a clock ramp) moves no verdict."""
    ref = medians([_row(8, 5.0, 1.0), _row(8, 5.2, 1.2), _row(8, 9.9, 1.1)])
    assert ref == {8: (5.2, 1.1)}
    ours = medians([_row(8, 5.9, 1.5), _row(8, 20.0, 1.6), _row(8, 6.1, 1.4)])
    lines, missed = table(ref, ours, {})
    assert missed == 0 and lines[2].startswith("| 8 | 5.20 | 6.10 | met | 1.10 | 1.50 | met |")


def test_nccl_tests_runs_one_gpu_per_thread_or_process_with_the_same_flags():
    sweep = Sweep("all_reduce", "8", "1G", 2, 20, 5, 1, 3, 8)
    flags = ["-b", "8", "-e", "1G", "-f", "2", "-n", "20", "-w", "5", "-G", "1", "-N", "3"]
    assert nccl_tests_command(Path("/b/all_reduce_perf"), sweep, "threads") == [
        "/b/all_reduce_perf", *flags, "-t", "8", "-g", "1"]
    mpirun = nccl_tests_command(Path("/b/all_reduce_perf"), sweep, "mpirun")
    assert mpirun[:3] == ["mpirun", "-np", "8"] and mpirun[-len(flags) - 3:] == [
        "/b/all_reduce_perf", *flags, "-g", "1"]


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_vs_nccltests.py"), *args],
                          capture_output=True, text=True, timeout=280, cwd=ROOT, env={**os.environ, **(env or {})})


def test_a_dry_run_prints_what_would_run_and_bad_flags_are_one_error(tmp_path):
    proc = _bench("--nccl-tests-src", "src", "--nprocs", "8", "-G", "1", "--out", str(tmp_path / "o"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("build: make -C src/src")
    assert lines[1].endswith("all_reduce_perf -b 8 -e 1G -f 2 -n 20 -w 5 -G 1 -N 3 -t 8 -g 1")
    assert "gpuval bench all_reduce -b 8 -e 1G -f 2 -n 20 -w 5 -G 1 -N 3 --nprocs 8 --via nccl4py" in lines[2]
    assert "--via torch" in lines[3] and not (tmp_path / "o").exists()
    for bad, said in ((["--nccl-tests", "x", "-b", "1X"], "bad size"), (["--nccl-tests", "x", "--collective", "foo"],
                      "unknown collective"), ([], "give --nccl-tests"), (["--nccl-tests", "x", "-N", "0"], "-N")):
        proc = _bench(*bad, "--dry-run")
        assert proc.returncode == 2 and said in proc.stderr.splitlines()[-1] and "Traceback" not in proc.stderr


_FAKE_NCCL_TESTS = """
import sys
from gpuval.collectives.nccltests_text import column_header, row_line
from gpuval.collectives.sizes import parse_size, sweep
from gpuval.collectives.table import Row, Side

args = sys.argv[1:]
open({log!r}, "w").write(" ".join(args))
flag = lambda name: args[args.index(name) + 1]
print("# Collective test starting: all_reduce_perf")
for line in column_header():
    print(line)
for cycle in range(int(flag("-N"))):
    for size in sweep(parse_size(flag("-b")), parse_size(flag("-e")), int(flag("-f"))):
        time = 1e6 if cycle != 1 else 1.0  # one fast cycle: the median is the others'
        side = Side(time, 0.0, 0.0, 0)
        print(row_line(Row(size, size // 4, "float", "sum", -1, side, side)))
"""


def test_the_whole_run_beside_a_stand_in_for_nccl_tests(tmp_path):
    """Two ranks: the stand-in binary is started as `-t 2 -g 1` with the sweep, -G and -N 3; gpuval runs through
    the nccl4py stand-in and through torch.distributed; the table holds each size's medians, and every size judged
    (<= 1 MiB here) meets the target against a reference whose median is 1e6 us."""
    log = tmp_path / "argv.txt"
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(f"#!{sys.executable}\n" + _FAKE_NCCL_TESTS.format(log=str(log)))
    binary.chmod(0o755)
    out = tmp_path / "out"
    proc = _bench("--nccl-tests", str(binary), "--nprocs", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w",
                  "1", "-N", "3", "--out", str(out), env={"PYTHONPATH": os.pathsep.join(
                      [str(ROOT / "tests" / "helpers" / "fake_nccl4py"), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert log.read_text() == "-b 1K -e 4K -f 4 -n 2 -w 1 -G 0 -N 3 -t 2 -g 1"
    text = (out / "bench-vs-nccltests.md").read_text()
    assert "median of -N 3: 0 judged rows missed" in text and "(nccl-tests: -t N -g 1)" in text
    rows = [line for line in text.splitlines() if line.startswith("| 1K") or line.startswith("| 4K")]
    assert len(rows) == 2 and all(line.count("| met |") == 2 and "| 1000000.00 |" in line for line in rows)
    for via in ("nccl4py", "torch"):
        doc = json.loads((out / f"gpuval-{via}.json").read_text())
        assert len(doc["results"]) == 2 * 3  # every size in every cycle
    assert "nccl4py's bindings" in json.loads((out / "gpuval-nccl4py.json").read_text())["gpuval"][
        "collectives_through"]


def test_the_check_keeps_going_past_failed_steps_and_writes_its_report(tmp_path):
    """No GPU here: nvidia-smi and the nccl-tests build fail for real; every Python step but the report (gpuval's
    commands, the torch reference, the probes, the bench) is a stand-in that fails at once, as each does without a
    GPU (on this machine each would first spend CPU-seconds importing torch); every step is still run, timed and
    listed, and the report is written from what they left."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = scripts/gpu-check-report.py ] && exec {sys.executable} "$@"\n'
                      'echo "python $*: no GPU" >&2; exit 2\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), str(out), str(tmp_path / "no-source")],
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "NCCL_TESTS_BUILD": str(tmp_path / "b")},
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [s[0] for s in steps if s[0] != "nccl-tests-build"] == [  # the build runs in the background meanwhile
        "env", "nvml-probe", "reference", "burn", "validate", "health", "health-2", "burst-order", "bench", "bench-graph",
        "collectives", "nccl-ras", "busy", "burn-busy", "pidns-idle", "pidns-busy", "pidns-pausing", "cuda-stale-mig",
        "cuda-stale-gpu", "cuda-index", "hidden", "health-sku", "report"]
    assert all(code != "0" for name, code, *_ in steps if name not in ("env", "report"))  # env: informational
    report = (out / "gpu-validation.md").read_text()
    assert "| validate | 2 |" in report and "the bench step produced no table" in report
    assert "the NVML probe printed no JSON" in report and "the burst step printed no table" in report
    assert "the RAS step printed no JSON" in report


def test_the_check_scripts_parse():
    """bash -n on the shell scripts, a compile of the Python ones: a syntax error is caught here, not on a lent GPU."""
    for script in ("gpu-check.sh", "gpu-check-prepare.sh"):
        got = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
    for script in ("gpu-check-nvml-probe.py", "gpu-check-burst.py", "gpu-check-load.py", "gpu-check-report.py",
                   "gpu-check-reference.py", "gpu-check-ras.py"):
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
