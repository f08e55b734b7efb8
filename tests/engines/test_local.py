"""The local engine for real: mpirun starts two gloo ranks of `gpuval bench` on this machine; cancel stops real
process groups."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpuval.engines import local
from gpuval.engines.local import LocalEngine
from gpuval.engines.spec import JobSpec
from tests.conftest import run_gpuval


def test_local_mpirun_end_to_end_then_logs():
    proc = run_gpuval("submit", "nccl", "--on", "local", "--procs-per-node", "2", "--wait", "--json",
                      "--", "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "5", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded" and out["results"][0]["where"]["ranks"] == 2
    logs = run_gpuval("jobs", "logs", out["job"]["job_id"], "--on", "local")
    assert "# Avg bus bandwidth" in logs.stdout


def _running(pid: int) -> bool:
    """The process exists and is no zombie."""
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


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
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)
    assert engine.status(job_id).state.value == "cancelled"


def test_cancel_of_a_job_that_ends_on_sigterm_does_not_wait():
    engine = LocalEngine()
    job_id, pid = _start(engine, "exec sleep 60")
    started = time.monotonic()
    engine.cancel(job_id)
    assert time.monotonic() - started < local.KILL_AFTER_S and not _running(pid)
