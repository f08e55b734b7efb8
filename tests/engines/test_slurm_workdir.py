"""A Slurm job's workdir that another user could change (red team 6 R1), on the session's real Slurm cluster, the
other user `nobody` (runuser) and the operator root: a workdir others may write is refused before anything is
sent (Slurm would write the job's output there as root, through a link that user planted), and sbatch reads the
script gpuval rendered from its standard input, never the job.sbatch in the folder (which another process could
swap between gpuval's write and sbatch's read)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuval.engines.base import Rendered
from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.spec import JobSpec
from tests.conftest import run_gpuval


def _next_job_id(cluster) -> int:
    """The id Slurm gives the next job: one above a held job's, sent and cancelled at once."""
    held = subprocess.run(["sbatch", "--parsable", "--hold", "--partition=debug", "--wrap", "true"],
                          env=cluster.cmd_env(), capture_output=True, text=True, timeout=60)
    assert held.returncode == 0, held.stderr
    job = held.stdout.strip().split(";")[0]
    subprocess.run(["scancel", job], env=cluster.cmd_env(), capture_output=True, timeout=60)
    return int(job) + 1


def test_r1_a_workdir_another_user_can_write_is_refused_and_nothing_is_sent(slurm):
    """nobody plants `gpuval-health-ID.out` links to root's 0600 file in a folder anyone may write, for the next
    job ids; root names that folder as the job's workdir. Before the fix the job was sent and Slurm wrote its output
    through the link, as root, over root's file; now it is one line and exit 2, no job, no file written there."""
    folder = Path(tempfile.mkdtemp(prefix="gpuval-r1-"))  # not under pytest's root-only temp dir: nobody works here
    folder.chmod(0o777)
    secret = Path(tempfile.mkdtemp(prefix="gpuval-r1-root-")) / "rootfile"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)
    try:
        first = _next_job_id(slurm)
        plant = "; ".join(f"ln -s {secret} {folder}/gpuval-health-{i}.out" for i in range(first, first + 8))
        assert subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", plant], timeout=60).returncode == 0
        proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "1", "--opt", f"workdir={folder}",
                          "--", "--recorded", "Standard_ND96asr_v4", env=slurm.env, timeout=120)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        [line] = proc.stderr.splitlines()
        assert line.startswith(f"error: {folder}: writable by others than its owner (mode 0777)"), line
        assert "job.sbatch" not in {p.name for p in folder.iterdir()}
        assert _next_job_id(slurm) == first + 1  # only the held job of the second look was sent
        assert secret.read_text() == "root's secret\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(secret.parent, ignore_errors=True)


def test_r1_sbatch_reads_the_rendered_script_not_the_file_in_the_folder(slurm, tmp_path: Path, monkeypatch):
    """job.sbatch is swapped right after gpuval writes it (what another user did in a shared folder, in the window
    before sbatch read the path): the script Slurm keeps for the job is still the one gpuval rendered."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    write = Rendered.write

    def write_then_swap(rendered: Rendered, directory: Path) -> list[Path]:
        written = write(rendered, directory)
        (directory / "job.sbatch").write_text("#!/bin/bash\ntouch /tmp/gpuval-r1-swapped\n")
        return written

    monkeypatch.setattr(Rendered, "write", write_then_swap)
    engine = SlurmEngine({"workdir": str(tmp_path / "own")})
    spec = JobSpec(name="r1swap", command=["sleep", "30"])
    job = engine.submit(spec)
    try:
        kept = subprocess.run(["scontrol", "write", "batch_script", job, "-"], env=slurm.cmd_env(),
                              capture_output=True, text=True, timeout=60)
        assert kept.returncode == 0, kept.stderr
        assert kept.stdout == engine.dryrun(spec).files["job.sbatch"]
    finally:
        subprocess.run(["scancel", job], env=slurm.cmd_env(), capture_output=True, timeout=60)
