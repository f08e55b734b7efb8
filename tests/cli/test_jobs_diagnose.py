"""`gpuval jobs diagnose` on a job it cannot reach: one line that starts "could not diagnose" and says why, exit 2,
no traceback (the real Slurm and Kubernetes cases, a job that ended and a node that does not answer, are in
tests/workloads/diagnose)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_gpuval


@pytest.mark.parametrize(("on", "why"), [
    ("local", "no local job '4242'"),
    ("azureml", "Azure ML does not say which node of its compute runs which process"),
])
def test_a_job_out_of_reach_is_one_line_and_exit_2(tmp_path: Path, on: str, why: str):
    proc = run_gpuval("jobs", "diagnose", "4242", "--on", on, "--json",
                      env={"GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: could not diagnose {'local' if on == 'local' else 'azure ml'} job 4242: ")
    assert why in line and "Traceback" not in proc.stderr
