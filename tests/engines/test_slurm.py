"""The Slurm engine against a real Slurm (the session's cluster, tests/helpers/slurm_session.py): submit, wait,
status, logs, parsed results, cancel, failure, a job killed at its time limit, a job its partition can never take,
the dry run against what sbatch got, following a running job's output, and shell-injection attempts that must stay
inert."""

from __future__ import annotations

import io
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.slurm.status import from_jobcomp, from_sacct
from gpuval.engines.spec import JobSpec
from gpuval.results.query import Query
from gpuval.results.store import open_store
from gpuval.workloads.base import ResultContext, printed_results
from tests.conftest import run_gpuval

SWEEP = ["--", "all_reduce", "-b", "1K", "-e", "64K", "-f", "4", "-n", "5", "-w", "1"]


def _env(slurm) -> dict[str, str]:
    return slurm.env


def _job_lines(lines) -> list[str]:
    """The job's own lines: srun's warning about this test cluster's cpu binding left out."""
    return [line for line in lines if not line.startswith("srun: ")]


def test_one_node_two_ranks_end_to_end(slurm, tmp_path: Path):
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--nodes", "1", "--procs-per-node", "2", "--wait",
                      "--json", "--results", str(tmp_path / "r.jsonl"), *SWEEP, env=_env(slurm), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded"
    [record] = out["results"]
    assert record["kind"] == "collective" and record["status"] == "pass"
    assert record["where"]["ranks"] == 2 and record["where"]["engine"] == "slurm"
    assert [r["size"] for r in record["data"]["results"]] == [1024, 4096, 16384, 65536]
    assert (tmp_path / "r.jsonl").read_text().count("\n") == 1
    job = out["job"]["job_id"]
    status = run_gpuval("jobs", "status", job, "--on", "slurm", "--json", env=_env(slurm))
    assert json.loads(status.stdout)["state"] == "succeeded"
    logs = run_gpuval("jobs", "logs", job, "--on", "slurm", env=_env(slurm))
    assert "# Avg bus bandwidth" in logs.stdout and "Rank  1" in logs.stdout


def test_two_nodes_end_to_end_and_the_status_fallbacks(slurm, monkeypatch):
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--nodes", "2", "--procs-per-node", "1", "--wait",
                      "--json", *SWEEP, env=_env(slurm), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["results"][0]["where"]["ranks"] == 2
    # slurmctld purges finished jobs from squeue about once a minute: read the fallbacks directly, from the
    # real cluster's own records. No slurmdbd here, so sacct answers nothing; the jobcomp file does.
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    job = out["job"]["job_id"]
    assert from_sacct([job]) == {}
    status = from_jobcomp([job])[job]
    assert status.state.value == "succeeded" and status.source == "jobcomp" and status.exit_code == 0


def test_records_name_the_nodes_that_ran_and_are_stored_once(slurm):
    """The records come from the job's own table: both fixture nodes run on this host (NodeHostname), so the
    ranks' `# Rank N ... on HOST` lines name it; the submitting side alone stores them (the job's rank 0 writes
    no results database), so the default database holds each record once."""
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--nodes", "2", "--procs-per-node", "1", "--wait",
                      "--json", *SWEEP, env=_env(slurm), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    node_host = socket.gethostname().split(".")[0]
    [record] = out["results"]
    assert record["where"]["hostname"] == node_host and record["data"]["hosts"] == [node_host]
    assert record["where"]["job_id"] == out["job"]["job_id"] and record["where"]["gpu_count"] == 0
    stored = open_store(os.environ["GPUVAL_DB"]).results(Query(run_ids=[record["run_id"]]))
    assert [r.id for r in stored] == [record["id"]]


def test_cancelled_job_is_cancelled(slurm):
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--procs-per-node", "2", "--json",
                      "--", "all_reduce", "-b", "64M", "-e", "1G", "-f", "2", "-n", "1000", env=_env(slurm))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)["job_id"]
    assert run_gpuval("jobs", "cancel", job, "--on", "slurm", env=_env(slurm)).returncode == 0
    waited = run_gpuval("jobs", "wait", job, "--on", "slurm", "--json", "--timeout", "60", env=_env(slurm))
    assert json.loads(waited.stdout)["job"]["state"] == "cancelled"
    assert waited.returncode == 2


def test_failing_job_is_failed(slurm):
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--opt", "python=/bin/false", "--wait", "--json",
                      *SWEEP, env=_env(slurm), timeout=120)
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "failed" and out["job"]["exit_code"] == 1
    assert out["results"] == [] and proc.returncode == 2


def test_quotes_substitutions_and_backticks_stay_inert(slurm, tmp_path: Path):
    canary = tmp_path / "pwned"
    nasty = f"a'b\"c $(touch {canary}) `touch {canary}` ;touch {canary}"
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--procs-per-node", "2", "--env", f"NASTY={nasty}",
                      "--wait", "--json", *SWEEP, env=_env(slurm), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not canary.exists()
    script = (tmp_path / "jobs" / "slurm" / "gpuval-nccl" / "job.sbatch").read_text()
    assert f"export NASTY={shlex.quote(nasty)}\n" in script
    refused = run_gpuval("submit", "nccl", "--on", "slurm", "--name", f"x$(touch {canary})", env=_env(slurm))
    assert refused.returncode == 2 and "job name" in refused.stderr and not canary.exists()
    refused = run_gpuval("submit", "nccl", "--on", "slurm", "--opt", f"partition=p;touch {canary}",
                         env=_env(slurm))
    assert refused.returncode == 2 and "partition" in refused.stderr and not canary.exists()


def test_health_as_a_real_job(slurm):
    """`gpuval health --json` under srun on both nodes, each judging the recorded ND96asr_v4 (no GPU here: a node
    where nothing is judged exits 2 by the one node verdict), so the job exits 0: the health reader parses the real
    output of two processes sharing one output file."""
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "2", "--wait", "--json", "--", "--recorded",
                      "Standard_ND96asr_v4", env=_env(slurm), timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded"
    records = out["results"]
    assert records and all(r["where"]["engine"] == "slurm" and r["where"]["job_id"] == out["job"]["job_id"]
                           for r in records)
    assert {r["status"] for r in records} <= {"skipped", "pass"}
    names = [r["name"] for r in records]
    assert "gpu_count" in names and len(names) == 2 * len(set(names))  # every check, once per node


def test_long_records_of_two_nodes_come_back_whole(slurm, monkeypatch, tmp_path):
    """Both nodes of a real two-node job write 150 records of about 2.4 KiB each to their stdout at once, as
    `gpuval health --results /dev/stdout` does. slurmstepd forwards output in 1 KiB messages that srun writes into
    the one output file as they come: whole lines of that length came back torn and mixed (3,696 of 4,000
    unreadable, measured here), and a two-node health job lost a node's FAIL record now and then. Written in
    pieces, every record is read back once, with its node."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    writer = tmp_path / "write.py"
    writer.write_text(
        "import os\nfrom pathlib import Path\nfrom gpuval.results import Result, Status, Where\n"
        "from gpuval.results.sink import append_jsonl\n"
        "host = os.environ['SLURMD_NODENAME']\n"
        "records = [Result(run_id='r', kind='health', name=f'c{i}', where=Where(hostname=host), "
        "status=Status.PASS, reason='x' * 2400) for i in range(150)]\n"
        "for record in records:\n    append_jsonl([record], Path('/dev/stdout'))\n")
    spec = JobSpec(name="long", command=[sys.executable, str(writer)], nodes=2, procs_per_node=1, workload="health")
    engine = SlurmEngine({"workdir": str(tmp_path)})
    job = engine.submit(spec)
    status = engine.wait(job, timeout_s=90, poll_s=0.5)
    assert status.state.value == "succeeded", list(engine.log_lines(job))[-5:]
    ctx = ResultContext(spec=spec, engine="slurm", job_id=job, run_id="r", started=datetime.now(timezone.utc))
    records = printed_results(engine.log_lines(job), ctx, kind="health")
    assert sorted((r.where.hostname, r.name) for r in records) == sorted(
        (host, f"c{i}") for host in ("n1", "n2") for i in range(150))


def test_dry_run_is_what_sbatch_gets_with_a_relative_workdir(slurm, tmp_path, monkeypatch):
    """torchx's contract: the dry run's job.sbatch is byte for byte the script sbatch read, the workdir resolved
    in render; a folder name full of shell syntax stays one `#SBATCH --output` directive that sbatch parses, and
    what gpuval writes (script, record) is readable by its owner only (S2: they hold --env values)."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    monkeypatch.chdir(tmp_path)
    canary = tmp_path / "pwned"
    workdir = f"runs/w d'q$(touch {canary})#x"
    spec = JobSpec(name="rel", command=["sh", "-c", "echo hello from $SLURM_JOB_ID"], env={"TOKEN": "s3cret"})
    engine = SlurmEngine({"workdir": workdir})
    shown = engine.dryrun(spec).text()
    job = engine.submit(spec)
    folder = tmp_path / workdir
    assert (folder / "job.sbatch").read_text() == shown
    assert engine.wait(job, timeout_s=60, poll_s=0.5).state.value == "succeeded"
    assert _job_lines(engine.log_lines(job)) == [f"hello from {job}\n"]
    assert (folder / f"rel-{job}.out").exists() and not canary.exists()
    assert stat.S_IMODE((folder / "job.sbatch").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    record = next((tmp_path / "jobs" / "slurm").glob("*.json"))
    assert stat.S_IMODE(record.stat().st_mode) == 0o600 and "s3cret" in record.read_text()


def test_status_of_a_job_slurm_never_saw_is_one_line_and_exit_2(slurm):
    """C13: it printed `unknown`, exit 0, as if that were a state."""
    proc = run_gpuval("jobs", "status", "987654", "--on", "slurm", env=_env(slurm))
    assert proc.returncode == 2 and "do not know it" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_follow_prints_the_output_as_the_job_writes_it(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    script = "for i in 1 2 3; do echo tick $i; sleep 1; done"
    engine = SlurmEngine()
    job = engine.submit(JobSpec(name="ticks", command=["sh", "-c", script]))
    out = io.StringIO()
    status = engine.follow(job, out, poll_s=0.3)
    ticks = ["tick 1\n", "tick 2\n", "tick 3\n"]
    assert status.state.value == "succeeded" and _job_lines(io.StringIO(out.getvalue())) == ticks
    follow = run_gpuval("jobs", "logs", job, "--on", "slurm", "--follow", env=_env(slurm))
    assert follow.returncode == 0 and _job_lines(io.StringIO(follow.stdout)) == ticks


def test_a_job_over_its_time_limit_is_failed_and_named(slurm, monkeypatch):
    """Slurm kills a job at --time and records TIMEOUT, with the batch shell's exit code: status says failed,
    names TIMEOUT and says what it means, so the exit code cannot pass for success. The job (sleep 300, --time 1,
    on n3) was submitted when the cluster started (tests/helpers/slurm_session.py): its minute has mostly passed
    by now."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    engine = SlurmEngine()
    job = slurm.overtime_job
    status = engine.wait(job, timeout_s=200, poll_s=2)
    assert (status.state.value, status.native_state) == ("failed", "TIMEOUT")
    assert status.detail.startswith("TIMEOUT: Slurm stopped it at its time limit")
    shown = run_gpuval("jobs", "status", job, "--on", "slurm", env=_env(slurm))
    assert "failed" in shown.stdout and "TIMEOUT" in shown.stdout


def test_a_job_its_partition_can_never_take_ends_the_wait_at_once_and_stays_queued(slurm):
    """A 2-node job sent to a partition that allows one node a job (`narrow`, made for this test with `scontrol
    create`, on the debug partition's nodes): Slurm queues it, pending for PartitionNodeLimit, for ever (its default
    EnforcePartLimits=NO). `jobs status` names the reason; `submit --wait` and `jobs wait` end on their third look
    (seconds, not their timeout) with one line saying why and exit 2; the job stays queued, the user's to cancel."""
    slurm.scontrol("create", "PartitionName=narrow", "Nodes=n[1-2]", "MaxNodes=1", "State=UP")
    job = None
    try:
        env = _env(slurm)
        sent = run_gpuval("submit", "nccl", "--on", "slurm", "--opt", "partition=narrow", "--nodes", "2", "--wait",
                          "--timeout", "600", "--json", *SWEEP, env=env, timeout=120)
        assert sent.returncode == 2, sent.stdout + sent.stderr
        [line] = sent.stderr.strip().splitlines()
        job = line.split("job ")[1].split()[0]
        assert "cannot start: PartitionNodeLimit: it asks for more or fewer nodes than its partition allows" in line
        assert f"gpuval jobs cancel {job} --on slurm" in line
        shown = run_gpuval("jobs", "status", job, "--on", "slurm", env=env)
        assert "pending" in shown.stdout and "PartitionNodeLimit" in shown.stdout, shown.stdout
        waited = run_gpuval("jobs", "wait", job, "--on", "slurm", "--timeout", "600", env=env, timeout=60)
        assert waited.returncode == 2 and "cannot start: PartitionNodeLimit" in waited.stderr
        assert "PENDING" in subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True,
                                           env=slurm.cmd_env(), timeout=30).stdout  # still the user's
    finally:
        if job:
            subprocess.run(["scancel", job], env=slurm.cmd_env(), timeout=30)
        slurm.scontrol("delete", "PartitionName=narrow")
