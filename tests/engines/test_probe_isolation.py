"""The probe cannot be shadowed by the folder it starts in (reliability-4 D2): a `gpuval/` package planted in the
caller's folder (or in a node's /tmp, where slurmstepd falls back when the caller's folder is missing there) would run
with the caller's rights, the operator's where root diagnoses. Each engine's probe runs `python -I -m gpuval` (no
working folder, no PYTHON* variables on sys.path) from / (Slurm: `srun --chdir=/`; here: run_here's cwd). A real run of
the local probe from the planted folder itself answers and imports nothing planted, where a plain `-m gpuval` there
runs the planted code (the control). The Slurm step's real run is in tests/workloads/diagnose/test_slurm.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuval.engines.local import LocalEngine
from gpuval.engines.probe import ProbeCall, run_here
from gpuval.engines.slurm.engine import SlurmEngine
from gpuval.workloads.diagnose.probe import read_probes
from tests.helpers.planted import plant_gpuval

def test_each_engines_probe_is_isolated_and_runs_from_the_root_folder():
    [slurm] = SlurmEngine().render_probe("4242", ["n1"], ["jobs", "probe"])
    at = slurm.argv.index("--chdir=/")
    assert slurm.argv[at + 1:] == (sys.executable, "-I", "-m", "gpuval", "jobs", "probe"), slurm.argv
    [local] = LocalEngine().render_probe("job-1", ["this"], ["jobs", "probe"])
    assert local.argv == (sys.executable, "-I", "-m", "gpuval", "jobs", "probe")
    where = run_here(ProbeCall("here", (sys.executable, "-I", "-c", "import os; print(os.getcwd())")), 30, "cwd")
    assert [line.strip() for line in where.lines] == ["/"]


def test_a_gpuval_planted_in_the_callers_folder_is_never_imported(tmp_path: Path):
    pwned = plant_gpuval(tmp_path)
    [call] = LocalEngine().render_probe("job-1", ["this"], ["jobs", "probe", "--no-ras", "--no-stacks"])
    done = subprocess.run(call.argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)  # from the planted folder itself, not even from /
    assert done.returncode == 0, done.stderr[-2000:]
    assert [node for node, _ in read_probes(("this", line) for line in done.stdout.splitlines())] == ["this"]
    assert not pwned.exists()
    subprocess.run([sys.executable, "-m", "gpuval"], cwd=tmp_path, capture_output=True, timeout=60)
    assert pwned.exists()  # the control: without -I the planted package is what runs
