"""`gpuval train` on 2 real CPU ranks (gloo) through torchrun and through `accelerate launch`, as one rank of a
torchrun job (an engine's variables), and the ways it cannot run. Also NCCL's transport lines, recorded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from gpuval.hooks import read_line
from gpuval.results import read_results
from gpuval.workloads.train.run import train_job_command
from gpuval.workloads.train.worker import TrainConfig
from tests.conftest import run_gpuval

SHORT = ["--steps", "12", "--batch-size", "16", "--image-size", "16"]


def _metrics(record: dict) -> dict[str, float]:
    return {m["name"]: m["value"] for m in record["metrics"]}


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_two_real_ranks_and_the_loss_goes_down(launcher, results_file):
    proc = run_gpuval("train", "--nprocs", "2", "--launcher", launcher, "--steps", "30", "--json",
                      "--results", str(results_file), timeout=180)
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    metrics = _metrics(record)
    assert record["kind"] == "train" and record["status"] == "pass" and record["params"]["launcher"] == launcher
    assert metrics["world_size"] == 2
    pids = record["data"]["pids"]
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids  # two real worker processes
    assert metrics["loss_last"] < metrics["loss_first"]
    assert 0 < metrics["step_time_p50_s"] <= metrics["step_time_p95_s"] and metrics["samples_per_s"] > 0
    assert read_results(results_file)[0].id == record["id"]


def test_sweep_gives_scaling_efficiency_against_one_rank():
    proc = run_gpuval("train", "--nprocs", "1,2", *SHORT, "--json", timeout=180)
    assert proc.returncode == 0, proc.stderr
    one, two = (_metrics(r) for r in json.loads(proc.stdout))
    assert (one["world_size"], two["world_size"]) == (1, 2) and one["scaling_efficiency"] == 1.0
    assert two["scaling_efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))


def test_one_rank_of_a_torchrun_job_runs_the_job_command(results_file):
    """What an engine runs per rank (Azure ML's PyTorch distribution, PyTorchJob, srun): rank 0 reports once, and
    every rank prints its step records (gpuval.hooks) every 10 steps on stderr, which is in the job's output."""
    cmd = train_job_command(TrainConfig(steps=12, batch_size=16, image_size=16), results=str(results_file))
    assert cmd[:2] == ["gpuval", "train"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
            "-m", "gpuval", *cmd[1:]]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    assert record["where"]["engine"] == "torchrun" and _metrics(record)["world_size"] == 2
    assert len(read_results(results_file)) == 1
    steps = sorted((r.rank, r.first, r.last) for r in map(read_line, proc.stderr.splitlines()) if r is not None)
    assert steps == [(0, 0, 9), (0, 10, 11), (1, 0, 9), (1, 10, 11)], proc.stderr[-2000:]


def test_a_rank_that_dies_is_a_one_line_error(tmp_path):
    """Rank 1 exits at interpreter start (a sitecustomize on its path), torchrun ends the job."""
    (tmp_path / "sitecustomize.py").write_text("import os\nif os.environ.get('RANK') == '1':\n    os._exit(3)\n")
    proc = run_gpuval("train", "--nprocs", "2", *SHORT, env={"PYTHONPATH": str(tmp_path)}, timeout=180)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "torchrun with 2 ranks failed" in errors[0], proc.stderr


def test_bad_input_is_a_one_line_error():
    for args, text in ((["--steps", "1"], "--steps"), (["--launcher", "deepspeed"], "--launcher"),
                       (["--nprocs", "two"], "--ranks")):
        proc = run_gpuval("train", *args)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
