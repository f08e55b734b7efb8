"""The lammps and train workloads under a real Slurm (slurmctld + two slurmd on this host, tests/engines/
conftest.py): `gpuval submit ... --on slurm --wait --json` runs LAMMPS under `srun --mpi=pmix` and torchrun under
srun for real, and the figures read back from the job's output must hang together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_gpuval

TRAIN_ARGS = ["--", "--steps", "12", "--batch-size", "16", "--image-size", "16"]


def _submit(slurm, workload: str, nodes: int, procs: int, *args: str, results: Path | None = None) -> dict:
    extra = ["--results", str(results)] if results else []
    proc = run_gpuval("submit", workload, "--on", "slurm", "--nodes", str(nodes), "--procs-per-node", str(procs),
                      "--wait", "--json", "--timeout", "240", *extra, *args, env=slurm.env, timeout=280)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded"
    return out


@pytest.mark.parametrize("nodes,procs", [(1, 2), (2, 1)])
def test_lammps_on_slurm(slurm, tmp_path: Path, nodes: int, procs: int):
    out = _submit(slurm, "lammps", nodes, procs, results=tmp_path / "r.jsonl")
    [record] = out["results"]
    assert record["kind"] == "lammps" and record["name"] == "lj" and record["status"] == "pass"
    assert record["where"]["engine"] == "slurm" and record["where"]["job_id"] == out["job"]["job_id"]
    data, metrics = record["data"], {m["name"]: m["value"] for m in record["metrics"]}
    # LAMMPS itself says it ran on every rank of the job, with the whole 32,000-atom LJ box for 100 steps
    assert data["procs"] == nodes * procs == record["params"]["ranks"]
    assert (data["atoms"], data["steps"], data["units"]) == (32000, 100, "lj")
    assert metrics["timesteps_per_s"] > 1
    # the log's figures agree with each other (Performance line against Loop time)
    assert metrics["timesteps_per_s"] == pytest.approx(data["steps"] / metrics["loop_time_s"], rel=0.02)
    assert metrics["atom_steps_per_s"] == pytest.approx(metrics["timesteps_per_s"] * data["atoms"], rel=0.02)
    assert metrics["tau_per_day"] > 0
    assert (tmp_path / "r.jsonl").read_text().count("\n") == 1


@pytest.mark.parametrize("nodes,procs", [(1, 2), (2, 1)])
def test_train_on_slurm(slurm, nodes: int, procs: int):
    out = _submit(slurm, "train", nodes, procs, *TRAIN_ARGS)
    [record] = out["results"]
    assert record["kind"] == "train" and record["status"] == "pass"
    assert record["where"]["engine"] == "slurm" and record["params"]["launcher"] == "torchrun"
    metrics = {m["name"]: m["value"] for m in record["metrics"]}
    assert metrics["world_size"] == nodes * procs
    assert len(set(record["data"]["pids"])) == nodes * procs  # real processes, one per rank
    assert metrics["samples_per_s"] > 0 and 0 < metrics["step_time_p50_s"] <= metrics["step_time_p95_s"]
    assert metrics["loss_last"] < metrics["loss_first"]
    assert record["params"]["steps"] == 12 and record["data"]["timed_steps"] == 12 - 3


def test_a_crashed_lammps_rank_fails_the_job_with_its_reason(slurm):
    """Every rank's lmp exits 1 at once (LAMMPS_BIN=/bin/false): the job fails, the output says why, nothing
    is reported as measured."""
    proc = run_gpuval("submit", "lammps", "--on", "slurm", "--procs-per-node", "2", "--env", "LAMMPS_BIN=/bin/false",
                      "--wait", "--json", "--timeout", "120", env=slurm.env, timeout=180)
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and out["job"]["state"] == "failed"
    assert out["results"] == [] and out["note"] == "the job's output holds no lammps results"
    logs = run_gpuval("jobs", "logs", out["job"]["job_id"], "--on", "slurm", env=slurm.env).stdout
    assert "error: LAMMPS rank 0 of 2 exited with code 1" in logs
