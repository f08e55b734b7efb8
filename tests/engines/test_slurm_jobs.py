"""Slurm jobs against the real test cluster (tests/engines/conftest.py): a failed job says why (srun's own lines,
the output's path) through every command that shows a job's end, the status of many jobs comes from one call
per source (squeue, then sacct, then the job-completion file), whatever state each job is in, and each line of a
job's output is tied to the node that printed it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gpuval.engines.slurm import SlurmEngine, status
from gpuval.engines.slurm.commands import run
from gpuval.engines.slurm.labels import LABEL_ENV
from gpuval.engines.spec import JobSpec
from gpuval.errors import EngineError, MissingDependency
from tests.conftest import run_gpuval

SWEEP = ["--", "all_reduce", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "-w", "1"]
MISSING_PLUGIN = "pmix_v9"  # a plugin this Slurm lacks: srun fails before any rank starts, as with a broken PMIx
SRUN_SAYS = f"srun: error: Invalid MPI type '{MISSING_PLUGIN}', --mpi=list for acceptable types"


def test_a_job_whose_srun_cannot_load_its_mpi_plugin_says_why(slurm, tmp_path: Path):
    """It printed "failed (exit code 1)" and "the job's output holds no nccl results": now srun's own lines and
    where the whole output is, in submit --wait, jobs wait and jobs status, for people and in JSON."""
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--procs-per-node", "2", "--opt", f"mpi={MISSING_PLUGIN}",
                      "--wait", *SWEEP, env=slurm.env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("failed" in line for line in lines)
    why = [line.strip().removeprefix("why: ") for line in lines if line.strip().startswith("why: ")]
    assert SRUN_SAYS in why and all(line.startswith("srun: error:") for line in why), lines
    [output] = [line.strip().removeprefix("output: ") for line in lines if line.strip().startswith("output: ")]
    assert Path(output).is_file() and SRUN_SAYS in Path(output).read_text()
    job = proc.stdout.split("slurm job ")[1].split(";")[0].split()[0]

    waited = run_gpuval("jobs", "wait", job, "--on", "slurm", "--json", env=slurm.env)
    assert waited.returncode == 2
    shown = json.loads(waited.stdout)["job"]
    assert shown["state"] == "failed" and SRUN_SAYS in shown["why"] and shown["output"] == output
    status_line = run_gpuval("jobs", "status", job, "--on", "slurm", env=slurm.env)
    assert status_line.returncode == 0 and SRUN_SAYS in status_line.stdout and output in status_line.stdout


def test_a_traceback_is_told_by_its_last_line(slurm, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    engine = SlurmEngine()
    script = "import sys; print('step 1'); print('all good so far', flush=True); raise KeyError('GPUVAL_RANK')"
    job = engine.submit(JobSpec(name="trace", command=["python3", "-c", script]))
    ended = engine.wait(job, timeout_s=60, poll_s=0.5)
    assert ended.state.value == "failed" and "KeyError: 'GPUVAL_RANK'" in ended.why  # srun's own line may follow
    assert "all good so far" not in ended.why and ended.output.endswith(f"trace-{job}.out")
    passed = engine.submit(JobSpec(name="fine", command=["true"]))
    assert engine.wait(passed, timeout_s=60, poll_s=0.5).why == []  # only a failed job is explained


def test_many_jobs_in_one_call_per_source(slurm, monkeypatch: pytest.MonkeyPatch):
    """Three jobs ended long enough ago for squeue to forget them (MinJobAge=2) and one still running: one squeue
    call for all four, one sacct call for the three it lacks (accounting is off here: it answers nothing), one
    read of the job-completion file; never a call per job."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    engine = SlurmEngine()
    ended = [engine.submit(JobSpec(name=f"quick-{i}", command=["sh", "-c", f"exit {i}"])) for i in range(3)]
    for job in ended:
        engine.wait(job, timeout_s=60, poll_s=0.5)
    running = engine.submit(JobSpec(name="slow", command=["sleep", "60"]))
    _until(lambda: engine.status(running).state.value == "running")
    _until(lambda: not status.from_squeue(ended))  # squeue has forgotten all three

    calls: list[list[str]] = []
    monkeypatch.setattr(status, "run", lambda argv, *a: calls.append(argv) or run(argv, *a))
    found = engine.statuses([*ended, running, "987654"])
    assert [argv[0] for argv in calls] == ["squeue", "sacct", "scontrol"]  # scontrol: where the jobcomp file is
    assert calls[0][-1] == f"--jobs={','.join([*ended, running, '987654'])}"
    assert {job: (s.state.value, s.exit_code, s.source) for job, s in found.items()} == {
        ended[0]: ("succeeded", 0, "jobcomp"), ended[1]: ("failed", 1, "jobcomp"),
        ended[2]: ("failed", 2, "jobcomp"), running: ("running", 0, "squeue")}  # 987654: nobody knows it
    engine.cancel(running)


def test_the_one_wrapper_names_the_command_and_slurms_complaint(slurm, monkeypatch: pytest.MonkeyPatch):
    from gpuval.engines.slurm.commands import output

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    with pytest.raises(EngineError, match=r"^scontrol show node: Node nope not found$"):
        output(["scontrol", "show", "node", "nope", "-o"])
    with pytest.raises(MissingDependency, match="sbatchx not found"):
        output(["sbatchx", "--parsable"])


def _until(ready, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def test_each_line_is_the_node_of_the_task_that_printed_it(slurm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """`node_lines` on a real two-node job pinned to n[1-2] with srun's labels (the fleet's way): each task prints
    the node slurmd says it runs on, and the engine ties every line to that node from the label and the host list
    alone. The red team's forgery: task 1 prints `junk\\r0: FORGED` with a bare carriage return; srun labels that
    as one line of task 1, and it stays task 1's (read in universal-newline mode it became a line of task 0's)."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    script = tmp_path / "print.py"
    script.write_text("import os, sys\n"
                      "me = os.environ['SLURMD_NODENAME']\n"
                      "forged = os.environ['SLURM_PROCID'] == '1'\n"
                      "sys.stdout.write(f'junk\\r0: FORGED by {me}\\n' if forged else f'I am {me}\\n')\n")
    spec = JobSpec(name="labels", command=[sys.executable, str(script)], nodes=2, procs_per_node=1,
                   env=dict(LABEL_ENV), extras={"slurm": {"nodelist": "n[1-2]"}})
    engine = SlurmEngine()
    job = engine.submit(spec)
    assert engine.wait(job, timeout_s=90, poll_s=0.5).state.value == "succeeded", list(engine.log_lines(job))
    placed = [(node, line) for node, line in engine.node_lines(job) if not line.startswith("srun: ")]
    assert sorted(placed) == [("n1", "I am n1\n"), ("n2", "junk\r0: FORGED by n2\n")], placed
    plain = engine.submit(spec.model_copy(update={"env": {}, "name": "plain"}))
    assert engine.wait(plain, timeout_s=90, poll_s=0.5).state.value == "succeeded"
    unlabelled = [(node, line) for node, line in engine.node_lines(plain) if not line.startswith("srun: ")]
    assert len(unlabelled) == 2 and all(node is None for node, _ in unlabelled)  # no labels asked: no node named
