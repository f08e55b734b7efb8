"""What every rank gpuval runs (bench, train) shares: torch, its device, joining and leaving the process group,
its ending (errors as one line, Ctrl-C 130, `os._exit`), and starting N ranks of a module on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn

from gpuval.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EngineError, GpuvalError, MissingDependency
from gpuval.node.dist_env import DistEnv, free_port


def require_torch() -> Any:
    """torch with torch.distributed, or a one-line error saying how to install it."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise MissingDependency("torch is not installed: pip install 'gpuval[torch]' (or torch==2.13.0)") from None
    return torch


def rank_device(torch: Any, backend: str, local_rank: int) -> tuple[Any, str]:
    """(device, backend) of a rank: `auto` is nccl where torch sees CUDA GPUs, else gloo; NCCL rank r drives
    visible GPU r (modulo their count), gloo ranks run on the CPU."""
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend != "nccl":
        return torch.device("cpu"), backend
    if not torch.cuda.is_available():
        raise MissingDependency("backend nccl needs CUDA GPUs, and torch sees none here; use --backend gloo")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device, backend


def first_line(exc: BaseException) -> str:
    """torch and gloo errors run to many lines and advice; keep what happened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" This is typically")[0]


def join(torch: Any, env: DistEnv, backend: str, timeout_s: float) -> tuple[Any, str]:
    """This rank's (device, backend), once it has joined the job's process group; a rendezvous that fails is one
    EngineError line (torch raises RuntimeError / DistNetworkError with many lines)."""
    device, backend = rank_device(torch, backend, env.local_rank)
    try:
        torch.distributed.init_process_group(backend, init_method=env.init_method, rank=env.rank,
                                             world_size=env.world_size, timeout=timedelta(seconds=timeout_s))
    except Exception as exc:
        raise EngineError(f"rank {env.rank} could not join {env.init_method}: {first_line(exc)}") from None
    return device, backend


def leave_group(torch: Any) -> None:
    """Tear the process group down; one already torn down by the failure being reported is fine."""
    try:
        torch.distributed.destroy_process_group()
    except Exception:
        pass


def rank_exit_code(work: Callable[[], int]) -> int:
    """Run one spawned rank's work and return its exit code: errors print one line on stderr and give 2 (exit 1
    stays "a check failed"), Ctrl-C gives 130 (what the rank measured was saved on the way out)."""
    try:
        return work()
    except GpuvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the top of a process: an unexpected failure is "could not run", never exit 1
        if os.environ.get("GPUVAL_DEBUG"):
            traceback.print_exc()
        print(f"error: {type(exc).__name__}: {exc} (GPUVAL_DEBUG=1 shows where)", file=sys.stderr)
        return EXIT_CANNOT_RUN


def leave(code: int) -> NoReturn:
    """End a process that joined a process group, once its work is done and saved: flush what it printed, then
    `_exit`. Normal interpreter teardown runs the destructors of torch's still-joinable communication threads,
    which can abort the process ("terminate called without an active exception") after a successful run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def spawn_local(module: str, request: Path, nprocs: int, env: Mapping[str, str]) -> list[int]:
    """Start `nprocs` ranks of `python -m module REQUEST` here with torchrun's variables (a local run takes the
    same path as a rank of an engine's job); rank 0 keeps the terminal, the others are quiet. Returns their exit
    codes once all have ended."""
    port = free_port()
    procs = []
    for rank in range(nprocs):
        rank_env = dict(os.environ, **env, RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-m", module, str(request)], env=rank_env,
                                      stdout=None if rank == 0 else subprocess.DEVNULL))
    return _wait_all(procs)


def _wait_all(procs: list[subprocess.Popen]) -> list[int]:
    """Wait for every rank; once one fails, give the others a moment, then stop them (a hung peer never ends)."""
    deadline = None
    try:
        while any(p.poll() is None for p in procs):
            failed = any(p.returncode not in (None, 0, EXIT_FAILED) for p in procs)
            if failed and deadline is None:
                deadline = time.monotonic() + 10
            if deadline is not None and time.monotonic() > deadline:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop_interrupted(procs)
        raise
    return [p.returncode for p in procs]


def _stop_interrupted(procs: list[subprocess.Popen]) -> None:
    """After Ctrl-C: ranks in the terminal's process group got it too; signal only those still running after a
    moment (the parent alone was interrupted), then give rank 0 time to save what it measured."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
