"""`gpuval lammps` with Debian's real LAMMPS and Open MPI: sweeps at 1 and 2 ranks, one rank of an mpirun job,
and the ways it cannot run (no lmp, a rank that crashes). Each figure is checked against the log LAMMPS wrote."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from gpuval.results import read_results
from gpuval.workloads.lammps.inputs import parse_scale
from gpuval.workloads.lammps.run import LammpsConfig, lammps_job_command
from tests.conftest import run_gpuval

pytestmark = pytest.mark.skipif(shutil.which("lmp") is None or shutil.which("mpirun") is None,
                                reason="needs LAMMPS and Open MPI: scripts/install.sh --test")

MPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def _log_figures(log: Path) -> dict[str, float]:
    """The figures straight from the log's own lines, independent of gpuval's parser."""
    text = log.read_text()
    loop = re.search(r"Loop time of (\S+) on (\d+) procs for (\d+) steps with (\d+) atoms", text)
    perf = re.search(r"Performance: (\S+) tau/day, (\S+) timesteps/s", text)
    return {"loop_time_s": float(loop[1]), "procs": int(loop[2]), "steps": int(loop[3]), "atoms": int(loop[4]),
            "tau_per_day": float(perf[1]), "timesteps_per_s": float(perf[2])}


def test_sweep_1_and_2_ranks_matches_the_logs(tmp_path, results_file):
    proc = run_gpuval("lammps", "--ranks", "1,2", "--json", "--workdir", str(tmp_path / "work"),
                      "--results", str(results_file), env=MPI_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    assert [r["params"]["ranks"] for r in records] == [1, 2]
    for record in records:
        log = _log_figures(tmp_path / "work" / f"lj-ranks{record['params']['ranks']}" / "log.lammps")
        metrics = {m["name"]: m["value"] for m in record["metrics"]}
        assert record["kind"] == "lammps" and record["data"]["procs"] == log["procs"] == record["params"]["ranks"]
        assert (record["data"]["atoms"], record["data"]["steps"]) == (log["atoms"], log["steps"]) == (32000, 100)
        assert metrics["loop_time_s"] == log["loop_time_s"]
        assert metrics["timesteps_per_s"] == log["timesteps_per_s"]
        assert metrics["tau_per_day"] == log["tau_per_day"]
        assert metrics["atom_steps_per_s"] == pytest.approx(32000 * 100 / log["loop_time_s"], rel=1e-9)
    one, two = ({m["name"]: m["value"] for m in r["metrics"]} for r in records)
    assert one["parallel_efficiency"] == 1.0
    assert two["parallel_efficiency"] == pytest.approx(two["timesteps_per_s"] / one["timesteps_per_s"] / 2)
    saved = read_results(results_file)
    assert [r.params["ranks"] for r in saved] == [1, 2] and saved[0].run_id == saved[1].run_id


def test_chute_benchmark_scaled(tmp_path):
    """The second input, replicated 2x along x: 64,000 grains, as the log says."""
    proc = run_gpuval("lammps", "--benchmark", "chute", "--scale", "2", "--ranks", "1", "--json",
                      "--workdir", str(tmp_path), env=MPI_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    assert record["params"]["scale"] == "2x1x1"
    assert record["data"]["atoms"] == _log_figures(tmp_path / "chute-ranks1" / "log.lammps")["atoms"] == 64000


def test_one_rank_of_an_mpirun_job_runs_the_job_command(results_file):
    """What an engine runs: `mpirun -np 2 <lammps_job_command>`; each rank starts lmp, rank 0 reports once."""
    cmd = lammps_job_command(LammpsConfig(scale=parse_scale("1")), results=str(results_file))
    assert cmd[:2] == ["gpuval", "lammps"]
    argv = ["mpirun", "-np", "2", "--allow-run-as-root", "--oversubscribe", sys.executable, "-m", "gpuval", *cmd[1:]]
    import subprocess

    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **MPI_ROOT})
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    assert record["where"]["engine"] == "mpirun" and record["data"]["procs"] == 2
    assert [r.params["ranks"] for r in read_results(results_file)] == [2]


def test_missing_lmp_says_how_to_get_it(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").symlink_to(shutil.which("mpirun"))
    proc = run_gpuval("lammps", "--ranks", "1", env={"PATH": str(bin_dir), **MPI_ROOT})
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "LAMMPS is not installed" in proc.stderr and "apt-get install lammps" in proc.stderr


def test_crashed_rank_is_a_clear_error_and_keeps_what_was_measured(tmp_path, results_file):
    """Rank 1 of the 2-rank run dies of SIGSEGV (a real signal, through a wrapper around lmp)."""
    wrapper = tmp_path / "lmp-crashing"
    wrapper.write_text('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -SEGV $$\nexec lmp "$@"\n')
    wrapper.chmod(0o755)
    proc = run_gpuval("lammps", "--ranks", "1,2", "--results", str(results_file),
                      env={"LAMMPS_BIN": str(wrapper), **MPI_ROOT}, timeout=120)
    assert proc.returncode == 2
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "LAMMPS on 2 ranks exited with code" in error[0], proc.stderr
    assert "SIGSEGV" in error[0], error[0]
    assert [r.params["ranks"] for r in read_results(results_file)] == [1]


def test_bad_flags_are_one_line_errors():
    for args, text in ((["--ranks", "0"], "positive"), (["--scale", "two"], "--scale"),
                       (["--benchmark", "rhodo"], "unknown LAMMPS benchmark"), (["--accel", "cuda"], "--accel")):
        proc = run_gpuval("lammps", *args, env=MPI_ROOT)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
