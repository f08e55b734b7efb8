"""No Python process gpuval starts imports what lies in the folder it starts in (red team 5 N1, reliability-4 D2's
weakness on every other path): a `gpuval/` package that user nobody planted in a folder where root runs gpuval
never runs, neither in the background fleet check, nor in `gpuval bench`'s local ranks, nor in a Slurm job whose
working folder it is. The planted package notes every import of it in PWNED beside it (tests/helpers/planted.py).
`gpuval train`'s launchers and the copy worker are proven from a planted folder in their own tests
(tests/workloads/train/test_run.py, tests/workloads/health/test_measurer_copy.py), the probe in
tests/engines/test_probe_isolation.py."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gpuval
from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.spec import JobSpec
from gpuval.node.unshadowed import UNSHADOW, child_env, module_argv
from tests.conftest import run_gpuval
from tests.helpers.planted import plant_gpuval

NOBODY = 65534
FLAGS = ("-m", "-c", "-I", "-P")  # how an interpreter is told what to run


def _planted(folder: Path) -> Path:
    """`folder` holding nobody's `gpuval/` package, all of it nobody's (a shared project folder); its PWNED."""
    folder.mkdir()
    pwned = plant_gpuval(folder)
    for path in (folder, *folder.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
    return pwned


def _ended(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` (not a child of this one) ended within `timeout_s` (gone, or a zombie)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _version(argv: list[str], folder: Path, env: dict[str, str] | None = None) -> str:
    """What `ARGV --version` prints, run from `folder` (or how it failed)."""
    done = subprocess.run([*argv, "--version"], cwd=folder, capture_output=True, text=True, timeout=60, env=env)
    return done.stdout.strip() if done.returncode == 0 else f"exit {done.returncode}: {done.stderr[-300:]}"


def test_each_start_runs_gpuval_itself_from_a_planted_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """This interpreter: `-P -m` (3.11+), else the unshadowing start (3.10, or another interpreter); and a plain
    `python -m` that a library in a child starts with the child's environment (PYTHONSAFEPATH). Each answers as
    gpuval, where a plain `python -m gpuval` there runs the planted package (the control)."""
    pwned = _planted(tmp_path / "project")
    with monkeypatch.context() as patch:
        patch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
        old = module_argv("gpuval")
    assert module_argv("gpuval") == [sys.executable, "-P", "-m", "gpuval"]
    assert old == [sys.executable, "-c", UNSHADOW, "gpuval"]
    assert module_argv("gpuval", "/usr/bin/python3") == ["/usr/bin/python3", "-c", UNSHADOW, "gpuval"]
    plain = [sys.executable, "-m", "gpuval"]
    answers = [_version(module_argv("gpuval"), pwned.parent), _version(old, pwned.parent),
               _version(plain, pwned.parent, child_env())]
    assert answers == [f"gpuval {gpuval.__version__}"] * 3 and not pwned.exists()
    _version(plain, pwned.parent)
    assert pwned.exists()


def test_every_python_that_gpuval_starts_is_started_unshadowed():
    """No `[<interpreter>, "-m", ...]` is written anywhere in gpuval but node/unshadowed.py: every call site starts
    its Python through it (the grep red team 5 asked for, kept)."""
    source = Path(gpuval.__file__).parent
    found = []
    for path in sorted(source.rglob("*.py")):
        if path.name == "unshadowed.py":
            continue
        text = path.read_text()
        if not any(f'"{flag}"' in text for flag in FLAGS):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.List, ast.Tuple)):
                found += [f"{path.relative_to(source)}:{node.lineno}" for before, flag in zip(node.elts, node.elts[1:])
                          if isinstance(flag, ast.Constant) and flag.value in FLAGS
                          and ast.unparse(before).endswith(("python", "executable"))]
    assert found == []


def test_the_background_fleet_check_never_imports_a_planted_gpuval(tmp_path: Path):
    """Root starts `gpuval fleet check` (the background, its default) from the planted folder. The check's one local
    job runs `/bin/false` as its interpreter, so the check ends within seconds, having run as gpuval."""
    pwned = _planted(tmp_path / "project")
    env = {"GPUVAL_JOBS_DIR": str(tmp_path / "jobs"), "GPUVAL_STATE_DIR": str(tmp_path / "state")}
    proc = run_gpuval("fleet", "check", "--on", "local", "--nodes", "1", "--opt", "python=/bin/false", "--poll",
                      "0.5", "--json", env=env, cwd=pwned.parent, timeout=60)
    assert proc.returncode == 0, proc.stderr
    started = json.loads(proc.stdout)
    assert _ended(started["pid"], 60), "the background check did not end"
    log = Path(started["log"]).read_text()
    assert not pwned.exists(), pwned.read_text()
    assert f'"run_id": "{started["run_id"]}"' in log, log[-2000:]  # the real check ran and reported


def test_bench_ranks_never_import_a_planted_gpuval(tmp_path: Path):
    """`gpuval bench` from the planted folder: its rank starter and ranks are gpuval's own."""
    pwned = _planted(tmp_path / "project")
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "--nprocs", "2",
                      env={"OMP_NUM_THREADS": "1"}, cwd=pwned.parent, timeout=120)
    assert not pwned.exists(), pwned.read_text()
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_slurm_jobs_gpuval_cannot_be_shadowed():
    """The job's step runs this interpreter as `python -P -m gpuval` (Python 3.11+; on 3.10, or another
    interpreter, the start that drops the working folder first: gpuval.node.unshadowed)."""
    spec = JobSpec(name="h", workload="health", command=["gpuval", "health", "--json"])
    script = SlurmEngine().render(spec).files["job.sbatch"]
    step = shlex.split(script.splitlines()[-1])
    at = step.index(sys.executable)
    assert step[at:at + 5] == [sys.executable, "-P", "-m", "gpuval", "health"], step


@pytest.mark.timeout(150)
def test_a_real_slurm_job_in_a_planted_folder_never_imports_it(slurm, tmp_path: Path):
    """Root submits `gpuval health` from the planted folder, that folder the job's working folder (--opt workdir):
    the job runs there, on the session cluster, and never imports the planted package. The folder itself is root's
    (0755), its package nobody's: a workdir another user owns or may write is refused before anything is sent
    (tests/engines/test_slurm_workdir.py)."""
    pwned = _planted(tmp_path / "project")
    os.chown(pwned.parent, 0, 0)
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "1", "--wait", "--json", "--opt",
                      f"workdir={pwned.parent}", "--", "--recorded", "Standard_ND96asr_v4", env=slurm.env,
                      cwd=pwned.parent, timeout=120)
    assert not pwned.exists(), pwned.read_text()
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["job"]["state"] == "succeeded" and out["results"]
    assert list(pwned.parent.glob("*.out"))  # it ran in that folder: its output is there
