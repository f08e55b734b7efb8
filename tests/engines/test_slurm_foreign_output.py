"""The output of a Slurm job gpuval did not submit, read by the operator (root) while the job's user (`nobody`)
chooses its name and its output path (reliability-4 D9), on the session's real Slurm cluster: the path comes from
squeue's JSON by key, so a job name that spells `StdOut=/dev/zero` is only a name; a path that is a device or that
the user turns into a symlink is one line and exit 2, read for not one byte."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import run_gpuval


def _as_nobody(cluster, folder: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", "env", f"SLURM_CONF={cluster.env['SLURM_CONF']}", *argv],
                          capture_output=True, text=True, cwd=folder, timeout=60)


def _sbatch(cluster, folder: Path, name: str, output: str, script: str) -> str:
    proc = _as_nobody(cluster, folder, "sbatch", "--parsable", "--partition=debug", "--ntasks=1", "-J", name, "-o",
                      output, "--wrap", script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _refused(job: str, cluster, *words: str) -> None:
    proc = run_gpuval("jobs", "logs", job, "--on", "slurm", env=cluster.env, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout[:200], proc.stderr)
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: ") and all(word in line for word in words), line


def test_d9_the_operator_reads_a_users_job_output_by_key_and_only_as_the_users_regular_file(slurm):
    """Three jobs of user nobody: one named `train StdOut=/dev/zero` (its real output in its own folder), one whose
    output is /dev/zero, one whose output file nobody replaces with a symlink while it runs. Root's `gpuval jobs
    logs` prints the first's real output (before the fix: it read /dev/zero until it ran out of memory), and
    refuses the other two in one line each, at once."""
    folder = Path(tempfile.mkdtemp(prefix="gpuval-d9-"))  # not under pytest's root-only temp dir: nobody works here
    folder.chmod(0o777)
    secret = folder / "root-only"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    jobs = []
    try:
        jobs.append(_sbatch(slurm, folder, "train StdOut=/dev/zero", str(folder / "out-%j.txt"),
                            "echo hello from nobody; sleep 120"))
        jobs.append(_sbatch(slurm, folder, "zero", "/dev/zero", "sleep 120"))
        jobs.append(_sbatch(slurm, folder, "moved", str(folder / "moved.txt"), "echo mine; sleep 120"))
        named_out, moved = folder / f"out-{jobs[0]}.txt", folder / "moved.txt"
        deadline = time.monotonic() + 90
        while not (named_out.exists() and named_out.stat().st_size and moved.exists() and moved.stat().st_size):
            assert time.monotonic() < deadline, "the jobs did not start"
            time.sleep(0.3)
        assert _as_nobody(slurm, folder, "sh", "-c", f"rm {moved} && ln -s {secret} {moved}").returncode == 0

        proc = run_gpuval("jobs", "logs", jobs[0], "--on", "slurm", env=slurm.env, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "hello from nobody\n", "")
        _refused(jobs[1], slurm, "/dev/zero", "not a regular file")
        _refused(jobs[2], slurm, str(moved), "symbolic link")
    finally:
        subprocess.run(["scancel", *jobs], env=slurm.cmd_env(), capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)
