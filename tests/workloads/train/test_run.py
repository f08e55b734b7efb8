"""`gpuval train` on real CPU ranks (gloo): a sweep of 1 and 2 through torchrun, 2 through `accelerate launch`, as
one rank of a torchrun job (an engine's variables), and the ways it cannot run. Also NCCL's transport lines,
recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuval.hooks import read_line
from gpuval.node.dist_env import free_port
from gpuval.results import read_results
from gpuval.workloads.base import ResultContext, WorkloadRequest, get_workload
from tests.conftest import run_gpuval
from tests.helpers.planted import plant_gpuval

SMALL = ["--batch-size", "16", "--image-size", "16"]  # a quarter of the defaults' pixels, half their batch
SHORT = ["--steps", "12", *SMALL]


def _metrics(record: dict) -> dict[str, float]:
    return {m["name"]: m["value"] for m in record["metrics"]}


def _two_real_ranks_trained(record: dict, launcher: str) -> None:
    """Two worker processes of `launcher`, each other than this one, passed, and the loss went down."""
    metrics = _metrics(record)
    assert record["kind"] == "train" and record["status"] == "pass" and record["params"]["launcher"] == launcher
    assert metrics["world_size"] == 2
    pids = record["data"]["pids"]
    assert len(pids) == 2 and len(set(pids)) == 2 and os.getpid() not in pids  # two real worker processes
    assert metrics["loss_last"] < metrics["loss_first"]
    assert 0 < metrics["step_time_p50_s"] <= metrics["step_time_p95_s"] and metrics["samples_per_s"] > 0


def test_a_sweep_of_one_and_two_real_ranks_trains_and_gives_scaling_efficiency_against_one_rank(results_file,
                                                                                                  tmp_path):
    """torchrun (the default launcher) at 1 and then 2 ranks: the 2-rank job's loss goes down, and its scaling
    efficiency is its throughput against twice the 1-rank job's. Run from a folder holding a planted `gpuval/`
    package: neither the launcher nor its workers import it (red team 5 N1)."""
    pwned = plant_gpuval(tmp_path)
    proc = run_gpuval("train", "--nprocs", "1,2", "--steps", "30", *SMALL, "--json", "--results", str(results_file),
                      cwd=tmp_path, timeout=180)
    assert not pwned.exists(), pwned.read_text()
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)
    _two_real_ranks_trained(records[1], "torchrun")
    one, two = (_metrics(r) for r in records)
    assert (one["world_size"], two["world_size"]) == (1, 2) and one["scaling_efficiency"] == 1.0
    assert two["scaling_efficiency"] == pytest.approx(two["samples_per_s"] / (2 * one["samples_per_s"]))
    assert [r.id for r in read_results(results_file)] == [r["id"] for r in records]


def test_two_real_ranks_under_accelerate_and_the_loss_goes_down(results_file, tmp_path):
    """As the sweep, from a folder holding a planted `gpuval/` package (accelerate launch and its workers)."""
    pwned = plant_gpuval(tmp_path)
    proc = run_gpuval("train", "--nprocs", "2", "--launcher", "accelerate", "--steps", "30", *SMALL, "--json",
                      "--results", str(results_file), cwd=tmp_path, timeout=180)
    assert not pwned.exists(), pwned.read_text()
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    _two_real_ranks_trained(record, "accelerate")
    assert read_results(results_file)[0].id == record["id"]


def _read_pipes(folder: Path, proc: subprocess.Popen) -> set[str]:
    """The dump pipes in `folder` that a process reads (opening one for writing without blocking fails with ENXIO
    where none does; nothing is written, so no rank dumps), looked for while the job runs."""
    found: set[str] = set()
    while proc.poll() is None and len(found) < 2:
        for pipe in folder.glob("fr-*.pipe"):
            try:
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
                found.add(pipe.name)
            except OSError:
                pass
        time.sleep(0.02)
    return found


def test_one_rank_of_a_torchrun_job_runs_the_job_command(tmp_path):
    """What an engine runs per rank (Azure ML's PyTorch distribution, PyTorchJob, srun): rank 0 reports once (its
    record on stdout, read back by the workload's reader), and every rank prints its step records (gpuval.hooks)
    every 10 steps on stderr, which is in the job's output. Each rank's Flight Recorder is on, its dump pipe (gloo:
    served by the workload) at gpuval's stem in its state folder while it trains (gpuval.workloads.train.flight)."""
    train = get_workload("train")
    spec = train.build(WorkloadRequest(workload="train", nodes=1, args=["--steps", "12", *SMALL]))
    cmd = spec.command
    assert cmd[:2] == ["gpuval", "train"] and cmd[-2:] == ["--results", "/dev/stdout"]
    port = free_port()
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
            "-m", "gpuval", *cmd[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "AZUREML_RUN_ID")}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "GPUVAL_HOOKS_DIR": str(tmp_path / "ranks")})
    pipes = _read_pipes(tmp_path / "ranks", proc)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert pipes == {"fr-0.pipe", "fr-1.pipe"}  # torchrun without --rdzv-id names no job
    assert not list((tmp_path / "ranks").glob("*.pipe"))  # each rank removed its own on the way out
    ctx = ResultContext(spec=spec, engine="torchrun", job_id="j", run_id="r", started=datetime.now(timezone.utc))
    (record,) = train.read(stdout, ctx)  # the record as the engine's reader finds it in the job's output
    assert record.params["launcher"] == "torchrun" and record.metric("world_size").value == 2
    steps = sorted((r.rank, r.first, r.last) for r in map(read_line, stderr.splitlines()) if r is not None)
    assert steps == [(0, 0, 9), (0, 10, 11), (1, 0, 9), (1, 10, 11)], stderr[-2000:]


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
