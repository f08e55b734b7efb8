"""The local engine for real: mpirun starts two gloo ranks of `gpuval bench` on this machine."""

from __future__ import annotations

import json

from tests.conftest import run_gpuval


def test_local_mpirun_end_to_end_then_logs():
    proc = run_gpuval("submit", "nccl", "--on", "local", "--procs-per-node", "2", "--wait", "--json",
                      "--", "all_reduce", "-b", "1K", "-e", "16K", "-f", "4", "-n", "5", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded" and out["results"][0]["where"]["ranks"] == 2
    logs = run_gpuval("jobs", "logs", out["job"]["job_id"], "--on", "local")
    assert "# Avg bus bandwidth" in logs.stdout
