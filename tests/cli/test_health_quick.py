"""`gpuval health --quick` (Slurm's HealthCheckProgram, the DaemonSet loop) and the operate options refused before
any check runs: the real command line in a subprocess, on this machine (no GPU: every check skips) and on the
recorded A100 (the most real stand-in for a GPU node). The Slurm and Kubernetes actions themselves are tested in
tests/operate/test_health_drain.py and test_kube_node.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gpuval.checks.suite import ORDER, all_checks, make_context
from gpuval.node.recorded import RecordedMachine
from gpuval.workloads.health.run import MEASURING, QUICK_REFUSAL, NoMeasurement, quick_checks
from tests.conftest import run_gpuval

A100 = "Standard_ND96asr_v4"
NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


def test_quick_runs_every_check_but_the_measuring_ones():
    assert [c.name for c in quick_checks(None)] == [n for n in ORDER if n not in MEASURING]
    assert set(MEASURING) <= set(ORDER)


def test_every_check_that_asks_the_measurer_is_left_out_of_quick():
    """The guard behind the MEASURING list: every check runs against the recorded A100 with the quick run's
    measurer, which refuses to measure; a check that asked it (and so would measure in a full run) must be one
    --quick leaves out. A measuring check added to the suite without its name in MEASURING fails here."""
    ctx = make_context(RecordedMachine.load(A100), A100, measurer=NoMeasurement())
    asked = {c.name for c in all_checks() if QUICK_REFUSAL in c.run(ctx).reason}
    assert asked and asked <= set(MEASURING)


def test_quick_on_a_recorded_node_without_a_full_result(tmp_path: Path):
    default_log = tmp_path / "default.jsonl"
    proc = run_gpuval("health", "--quick", "--recorded", A100, "--json",
                      env={**NO_IMDS, "GPUVAL_RESULTS": str(default_log)})
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert list(rows) == [n for n in ORDER if n not in MEASURING] + ["last_full"]
    # The recording's readings pass; what it did not record (AER, module list, limits...) is skipped, never judged
    read = {n: r["status"] for n, r in rows.items() if n != "last_full"}
    assert set(read.values()) == {"pass", "skipped"} and read["ecc"] == read["gpu_count"] == "pass"
    assert rows["last_full"]["status"] == "skipped" and "no full check" in rows["last_full"]["reason"]
    assert rows["ecc"]["params"]["quick"] is True
    assert not default_log.exists()  # a quick run keeps no log unless asked (--results)


def test_quick_saves_its_records_where_asked_and_refuses_a_measuring_check(tmp_path: Path):
    results = tmp_path / "quick.jsonl"
    proc = run_gpuval("health", "--quick", "--recorded", A100, "--results", str(results), env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    assert results.read_text().count("\n") == len(ORDER) - len(MEASURING) + 1
    # 13 skipped: the temperature, firmware, gpu_mode and cuda_init have nothing recorded on this A100 node; imex
    # does not apply to it (no multi-node NVLink)
    assert "last_full" in proc.stdout and "14 pass, 13 skipped" in proc.stdout
    proc = run_gpuval("health", "--quick", "--check", "gemm_tflops", env=NO_IMDS)
    assert proc.returncode == 2 and "--quick only reads: gemm_tflops measures" in proc.stderr


def test_quick_imports_no_torch_and_no_database():
    """What a HealthCheckProgram pays for: the import trace of a real quick run names neither torch nor the
    results store's SQLAlchemy (a quick run saves nothing unless --results)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuval", "health", "--quick", "--recorded",
                           A100], capture_output=True, text=True, env={**os.environ, **NO_IMDS}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "gpuval.workloads.health.run" in modules
    assert not {m for m in modules if m.split(".")[0] in ("torch", "sqlalchemy", "alembic")}


def test_quick_on_this_machine_is_well_under_slurms_limit():
    """This machine has no GPU (every GPU check skips quickly): the bound is loose on purpose, the figures are
    benchmarks/health_quick.py's. Slurm kills a HealthCheckProgram after 60 s."""
    started = time.monotonic()
    proc = run_gpuval("health", "--quick", env=NO_IMDS)
    assert proc.returncode == 2, proc.stderr  # nothing here to judge (no GPU, no full result kept): never a pass
    assert time.monotonic() - started < 15


def test_operate_options_are_refused_before_any_check_runs(tmp_path: Path):
    for args, said in ((["--drain", "--node", "n1,n2", "--scheduler", "slurm"], "one node name"),
                       (["--node", "n[1-4]"], "one node name"),
                       (["--drain", "--scheduler", "pbs"], "unknown scheduler 'pbs'"),
                       (["--drain", "--node", "n1"], "no scheduler here"),
                       (["--quick", "--max-age", "a week"], "--max-age 'a week'"),
                       (["--prometheus", str(tmp_path / "m.txt")], "must end in .prom")):
        proc = run_gpuval("health", "--recorded", A100, *args, env={**NO_IMDS, "PATH": "/nonexistent"})
        assert proc.returncode == 2, (args, proc.stderr)
        assert said in proc.stderr and proc.stdout == "" and proc.stderr.count("\n") == 1, (args, proc.stderr)


def test_a_recording_is_kept_as_a_full_result_only_for_a_named_node(tmp_path: Path):
    """Judging a recording on a real node (a demo, a what-if) must not become that node's last full result: its
    next --quick would fold in a verdict on hardware it never read (a recorded FAIL would keep it drained)."""
    state = {**NO_IMDS, "GPUVAL_STATE_DIR": str(tmp_path / "state"), "SLURMD_NODENAME": "gpu-7"}
    plain = run_gpuval("health", "--recorded", A100, env=state)
    assert plain.returncode == 0 and "not kept: a recording says nothing about this machine" in plain.stdout
    assert not (tmp_path / "state" / "last-full").exists()
    named = run_gpuval("health", "--recorded", A100, "--node", "gpu-7", env=state)
    assert named.returncode == 0 and "kept for --quick: pass" in named.stdout
    assert (tmp_path / "state" / "last-full" / "gpu-7.json").exists()
