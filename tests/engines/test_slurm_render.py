"""The sbatch script under attack: hostile values in every field that
reaches the script, the rendered job.sbatch then *executed* by bash with stub `srun` and `scontrol` on PATH (they
log their arguments and run nothing). No payload may run, every value must reach srun's argv as typed, and every
`#SBATCH` line must stay one directive. A value with a newline or CR is refused before anything renders.
No Slurm daemon is needed: the real-cluster runs are in test_slurm.py."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.spec import JobSpec, Mount
from gpuval.errors import UsageError
from tests.conftest import run_gpuval

PAYLOADS = ["$(touch {c})", "`touch {c}`", ";touch {c}", "&& touch {c}", "| touch {c}", "'; touch {c} #",
            '"; touch {c} #', "${{IFS}}touch${{IFS}}{c}", "a b # c", "\\'$(touch {c})"]

SRUN = """#!/bin/bash
printf 'HOSTILE=%s\\n' "$HOSTILE" >> "$STUB_LOG"
for arg in "$@"; do printf '%s\\n' "$arg"; done >> "$STUB_LOG"
echo '----' >> "$STUB_LOG"
"""
SCONTROL = """#!/bin/bash
if [ "$2" = hostnames ]; then echo n1; else echo "NodeName=n1 NodeAddr=127.0.0.1 Arch=x86_64"; fi
"""


def _stubs(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_LOG=str(tmp_path / "srun.log"),
                SLURM_JOB_NODELIST="n1", SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="1", SLURM_NODEID="0",
                SLURM_CPUS_ON_NODE="2")


def _steps(tmp_path: Path) -> list[list[str]]:
    """The argv of every srun call the script made."""
    text = (tmp_path / "srun.log").read_text()
    return [step.strip("\n").split("\n") for step in text.split("----\n") if step.strip()]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_values_reach_srun_as_typed_and_run_nothing(tmp_path, payload):
    canary = tmp_path / "pwned"
    value = payload.format(c=canary)
    workdir = tmp_path / f"wd {value}"
    spec = JobSpec(name="inject", command=["gpuval", "bench", value], env={"HOSTILE": value}, image=f"img:{value}",
                   mounts=[Mount(source=f"/src {value}", target="/data")])
    options = {"workdir": str(workdir), "python": f"/py {value}", "warmup": True, "source": ""}
    script = SlurmEngine(options).render(spec).files["job.sbatch"]
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0

    proc = subprocess.run(["bash", str(path)], env=_stubs(tmp_path), cwd=tmp_path, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not canary.exists()
    warm, main = _steps(tmp_path)
    assert f"--container-image=img:{value}" in warm
    assert main[-3:] == ["gpuval", "bench", value] and f"--container-mounts=/src {value}:/data" in main
    assert main[0] == f"HOSTILE={value}"  # the exported variable, as typed
    # Each #SBATCH line is one directive, as sbatch splits it (shell words): the workdir stays in --output.
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    words = [shlex.split(line.removeprefix("#SBATCH ")) for line in directives]
    assert all(len(w) == 1 for w in words)
    assert [f"--output={workdir}/inject-%j.out"] in words


@pytest.mark.parametrize("bad", ["\n", "\r", "\r\n", "\x00", "\t"])
def test_a_line_break_in_any_value_is_refused(tmp_path, bad):
    """A shell-injection exploit: `--opt workdir=$'DIR\\ntouch PWNED #'` rendered a shell line. Now refused."""
    canary = tmp_path / "pwned"
    exploit = f"{tmp_path}/wd{bad}touch {canary} #"
    with pytest.raises(UsageError, match="control character"):
        SlurmEngine({"workdir": exploit}).render(JobSpec(name="j", command=["true"]))
    with pytest.raises(UsageError, match="control character"):
        SlurmEngine({}).render(JobSpec(name="j", command=["true"], extras={"slurm": {"partition": f"p{bad}x"}}))
    if "\x00" in bad:
        return  # no NUL can pass through a command line
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--dry-run", "--opt", f"workdir={exploit}")
    assert proc.returncode == 2 and "control character" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--dry-run", "--env", f"X=a{bad}touch {canary}")
    assert proc.returncode == 2 and "control character" in proc.stderr
    assert not canary.exists()


def test_a_percent_in_the_workdir_is_refused():
    """sbatch expands %j, %u ... in --output: a folder with % would put the output elsewhere."""
    with pytest.raises(UsageError, match="no %"):
        SlurmEngine({"workdir": "/shared/100%"}).render(JobSpec(name="j", command=["true"]))


def test_a_relative_workdir_is_resolved_in_the_dry_run(tmp_path, monkeypatch):
    """The dry run shows the absolute path sbatch gets (it used to show the relative one, submit the other)."""
    monkeypatch.chdir(tmp_path)
    rendered = SlurmEngine({"workdir": "jobs/here"}).dryrun(JobSpec(name="rel", command=["true"]))
    assert rendered.workdir == str(tmp_path / "jobs" / "here")
    assert f"#SBATCH --output={tmp_path}/jobs/here/rel-%j.out\n" in rendered.text()


def test_container_opt_runs_gpuvals_image(monkeypatch):
    """No --image: the host; `--opt container=true`: gpuval's image, GPUVAL_IMAGE when set."""
    from gpuval import __version__

    spec = JobSpec(name="j", command=["gpuval", "health"])
    assert "--container-image" not in SlurmEngine({}).render(spec).text()
    monkeypatch.delenv("GPUVAL_IMAGE", raising=False)
    text = SlurmEngine({"container": True}).render(spec).text()
    assert f"--container-image=ghcr.io/gpuval/gpuval:{__version__}" in text
    monkeypatch.setenv("GPUVAL_IMAGE", "myacr.azurecr.io/gpuval:dev")
    rendered = SlurmEngine({"container": True}).render(spec)
    assert "--container-image=myacr.azurecr.io/gpuval:dev" in rendered.text()
    assert rendered.spec.image == "myacr.azurecr.io/gpuval:dev"
