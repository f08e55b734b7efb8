"""A fleet check on nodes of the session's real Slurm cluster (its fleet partition, tests/helpers/slurm_session.py)
whose health suites judge recorded machines instead of this GPU-less machine: a sitecustomize on the jobs'
PYTHONPATH, acting in `gpuval fleet node-test` only, hands each node's suite its own recording (as the red team
planted its faults). Everything else is real: the jobs, the lines read back per node, the verdicts, the drains read
back from slurmctld (the cluster's own `drained`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import run_gpuval

_HOOK = """
import dataclasses, os, sys
if "node-test" in sys.argv and os.environ.get("SLURMD_NODENAME"):
    import gpuval.workloads.health.run as health

    real = health.run_health

    def run_health(req, *args, **kwargs):
        recording = os.path.join({machines!r}, os.environ["SLURMD_NODENAME"] + ".yaml")
        return real(dataclasses.replace(req, recorded=recording), *args, **kwargs)

    health.run_health = run_health
"""


def recorded_check(slurm, tmp_path: Path, machines: dict[str, Path], *args: str,
                   timeout: float = 280) -> subprocess.CompletedProcess:
    """`gpuval fleet check --on slurm --wait` of the nodes of `machines` (node -> its recorded machine) with `args`."""
    folder, hook = tmp_path / "machines", tmp_path / "hook"
    folder.mkdir(exist_ok=True)
    hook.mkdir(exist_ok=True)
    for node, machine in machines.items():
        shutil.copy(machine, folder / f"{node}.yaml")
    (hook / "sitecustomize.py").write_text(_HOOK.format(machines=str(folder)))
    env = {**slurm.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs"), "GPUVAL_STATE_DIR": str(tmp_path / "state")}
    return run_gpuval("fleet", "check", "--on", "slurm", "--opt", "partition=fleet", "--nodelist", ",".join(machines),
                      "--wait", "--env", f"PYTHONPATH={hook}", *args, env=env, timeout=timeout)
