"""Real training jobs that use gpuval.hooks (tests/hooks/timer_job.py), started the way users start them: torchrun
or `accelerate launch`, gloo ranks on this machine's CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuval.node.dist_env import free_port

SCRIPT = Path(__file__).resolve().parent.parent / "hooks" / "timer_job.py"


def job_command(mode: str, nprocs: int, steps: int, every: int, slow_ms: float,
                hang_at: int | None = None) -> list[str]:
    """The launch line: `accelerate launch --multi_gpu` (real ranks without GPUs) for mode accelerate, else torchrun."""
    args = [str(SCRIPT), mode, str(steps), str(every), str(slow_ms)] + ([str(hang_at)] if hang_at is not None else [])
    port = str(free_port())
    if mode == "accelerate":
        return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
                "--num_processes", str(nprocs), "--main_process_ip", "127.0.0.1", "--main_process_port", port,
                "--mixed_precision", "no", "--dynamo_backend", "no", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nprocs), "--master_addr",
            "127.0.0.1", "--master_port", port, *args]


def job_env(state_dir: Path) -> dict[str, str]:
    """The job's environment: its ranks' state files in `state_dir`, one thread per rank."""
    return {**os.environ, "GPUVAL_HOOKS_DIR": str(state_dir), "OMP_NUM_THREADS": "1"}


def run_job(mode: str, nprocs: int, steps: int, every: int, slow_ms: float, state_dir: Path,
            timeout: float = 200) -> subprocess.CompletedProcess:
    """Run a job to its end; its ranks' records are on its stderr."""
    return subprocess.run(job_command(mode, nprocs, steps, every, slow_ms), capture_output=True, text=True,
                          env=job_env(state_dir), timeout=timeout, stdin=subprocess.DEVNULL)


def stop_job(launcher: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a job started with `job_command`: SIGTERM to its launcher, which stops its ranks (torchrun starts each
    in a session of its own, so killing the launcher alone would leave them running)."""
    launcher.terminate()
    try:
        launcher.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait()
