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


@pytest.mark.parametrize(("args", "said"), [
    (("--cut", "1.5"), "--cut 1.5: the shortfall judged slow is a share between 0 and 1"),
    (("--links",), "--links goes with --retest"),
    (("--partners", "n[2-"), "n[2-"),
    (("--size", "0"), "--size 0"),
])
def test_d16_retest_options_are_checked_before_any_probe(tmp_path: Path, args: tuple[str, str], said: str):
    """reliability-4 D16: `--retest`'s --cut, --partners and --size were checked only after every node of the job
    had been probed, and a bad one threw the diagnosis away (no records, no report); --size 0 ran. Each is now
    refused first: the job here is out of reach (no Slurm answers at this SLURM_CONF), so an error that names the
    option rather than "could not diagnose" proves the check came before the diagnosis. So is --links without
    --retest."""
    retest = () if args == ("--links",) else ("--retest",)
    proc = run_gpuval("jobs", "diagnose", "4242", "--on", "slurm", *retest, *args, "--results",
                      str(tmp_path / "n.jsonl"), env={"SLURM_CONF": str(tmp_path / "none.conf")}, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    [line] = proc.stderr.splitlines()
    assert said in line and "could not diagnose" not in line, line
    assert not (tmp_path / "n.jsonl").exists()
