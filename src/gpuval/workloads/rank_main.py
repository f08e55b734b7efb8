"""What every rank gpuval runs (bench, train) shares: its device, and its ending (errors as one line, Ctrl-C 130)."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, NoReturn

from gpuval.errors import EXIT_CANNOT_RUN, GpuvalError, MissingDependency


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
