"""The local engine for real: mpirun starts two gloo ranks of `gpuval bench` on this machine; cancel stops real
process groups; the dry run is the job.sh that runs; files holding the job's environment are private."""

from __future__ import annotations

import io
import json
import stat
import time
from pathlib import Path

import pytest

from gpuval.engines import local
from gpuval.engines.local import LocalEngine
from gpuval.engines.spec import JobSpec
from gpuval.errors import EngineError
from tests.conftest import run_gpuval
from tests.helpers.processes import running


def test_local_mpirun_end_to_end_then_logs():
    proc = run_gpuval("submit", "nccl", "--on", "local", "--procs-per-node", "2", "--wait", "--json",
                      "--", "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "5", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded" and out["results"][0]["where"]["ranks"] == 2
    logs = run_gpuval("jobs", "logs", out["job"]["job_id"], "--on", "local")
    assert "# Avg bus bandwidth" in logs.stdout


def _start(engine: LocalEngine, script: str) -> tuple[str, int]:
    """Submit `bash -c script` (which writes its pid to job.pid) and wait until it runs; returns (job id, pid)."""
    job_id = engine.submit(JobSpec(name="sleeper", command=["bash", "-c", f"echo $$ > job.pid; {script}"]))
    pid_file = Path(engine._workdir(job_id)) / "job.pid"
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    return job_id, int(pid_file.read_text())


def test_cancel_kills_a_job_that_ignores_sigterm(monkeypatch):
    """SIGTERM first; a job still there after the grace period gets SIGKILL (grace cut to 1 s for the test)."""
    monkeypatch.setattr(local, "KILL_AFTER_S", 1.0)
    engine = LocalEngine()
    job_id, pid = _start(engine, "trap '' TERM; exec sleep 60")
    started = time.monotonic()
    engine.cancel(job_id)
    assert time.monotonic() - started >= 1.0
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid)
    assert engine.status(job_id).state.value == "cancelled"


def test_cancel_of_a_job_that_ends_on_sigterm_does_not_wait():
    engine = LocalEngine()
    job_id, pid = _start(engine, "exec sleep 60")
    started = time.monotonic()
    engine.cancel(job_id)
    assert time.monotonic() - started < local.KILL_AFTER_S and not running(pid)


def test_dry_run_is_the_job_sh_that_runs_and_files_are_private(_private_jobs):
    """The dry run's job.sh is byte for byte the one the job runs, in the folder named by the job id chosen in
    render; job.sh and the record hold --env values, so they are 0600 in 0700 folders (S2)."""
    engine = LocalEngine()
    spec = JobSpec(name="same", command=["sh", "-c", "echo $TOKEN"], env={"TOKEN": "s3cret"})
    rendered = engine.dryrun(spec)
    job_id = engine.submit(spec)
    assert job_id == rendered.job_name and job_id.startswith("same-")
    folder = Path(engine._workdir(job_id))
    assert (folder / "job.sh").read_text() == rendered.text()
    assert engine.wait(job_id, timeout_s=30, poll_s=0.1).state.value == "succeeded"
    assert list(engine.log_lines(job_id)) == ["s3cret\n"]
    record = _private_jobs / "local" / f"{job_id}.json"
    for path in (folder / "job.sh", record):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for path in (folder, _private_jobs / "local", _private_jobs):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    # The same spec again is the same job: refused, not started twice.
    with pytest.raises(EngineError, match="submitted already"):
        engine.submit(spec)


def test_a_wait_limit_that_is_not_positive_sends_nothing(_private_jobs):
    """C11: `--wait --timeout -1` submitted the job, then gave up at once and left it running."""
    for limit in ("-1", "0"):
        proc = run_gpuval("submit", "nccl", "--on", "local", "--wait", "--timeout", limit, "--", "all_reduce",
                          "-b", "1K", "-e", "1K", "-n", "1")
        assert proc.returncode == 2 and "--timeout" in proc.stderr and "Traceback" not in proc.stderr
    assert not (_private_jobs / "local").exists()


def test_follow_copies_the_output_while_the_job_runs():
    engine = LocalEngine()
    job_id = engine.submit(JobSpec(name="ticks", command=["sh", "-c", "for i in 1 2; do echo t$i; sleep 0.3; done"]))
    out = io.StringIO()
    assert engine.follow(job_id, out, poll_s=0.1).state.value == "succeeded"
    assert out.getvalue() == "t1\nt2\n"


def test_a_failed_job_says_why_and_where_its_output_is():
    """submit --wait on this machine: a traceback is told by its exception line; the output's path is shown."""
    engine = LocalEngine()
    job_id = engine.submit(JobSpec(name="boom", command=["python3", "-c", "print('loading'); import nope_nothing"]))
    ended = engine.wait(job_id, timeout_s=60, poll_s=0.2)
    assert ended.state.value == "failed" and ended.why == ["ModuleNotFoundError: No module named 'nope_nothing'"]
    assert ended.output == str(Path(engine._workdir(job_id)) / "output.log")
    shown = run_gpuval("jobs", "status", job_id, "--on", "local")
    assert "why: ModuleNotFoundError: No module named 'nope_nothing'" in shown.stdout
    assert f"output: {ended.output}" in shown.stdout.replace("\n", "")
