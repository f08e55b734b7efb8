"""The lammps and train workloads on this machine (`--on local`): mpirun starting `gpuval lammps` ranks that run
the real lmp, torchrun starting real `gpuval train` ranks; their records read back from the job's output."""

from __future__ import annotations

import json

from tests.conftest import run_gpuval


def _submit(workload: str, *args: str) -> dict:
    proc = run_gpuval("submit", workload, "--on", "local", "--procs-per-node", "2", "--wait", "--json",
                      "--timeout", "240", *args, timeout=280)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded"
    return out


def test_lammps_under_mpirun():
    [record] = _submit("lammps", "--", "--benchmark", "chute")["results"]
    assert record["kind"] == "lammps" and record["name"] == "chute" and record["where"]["engine"] == "local"
    assert record["data"]["procs"] == 2 and record["data"]["atoms"] == 32000
    assert {m["name"] for m in record["metrics"]} >= {"timesteps_per_s", "atom_steps_per_s", "loop_time_s"}


def test_train_under_torchrun():
    [record] = _submit("train", "--", "--steps", "10", "--batch-size", "16", "--image-size", "16")["results"]
    metrics = {m["name"]: m["value"] for m in record["metrics"]}
    assert record["kind"] == "train" and record["where"]["engine"] == "local"
    assert metrics["world_size"] == 2 and len(set(record["data"]["pids"])) == 2
    assert metrics["loss_last"] < metrics["loss_first"] and metrics["samples_per_s"] > 0
