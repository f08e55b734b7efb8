"""Local gloo ranks of a test script, forked from one process that imported torch once:
`python tests/helpers/forked_ranks.py NPROCS SCRIPT [ARGS...]`, built by `command(...)`.

What the collective scripts of tests/collectives check is the collectives' data, not how their ranks were started,
and torchrun costs an agent and NPROCS interpreters, each importing torch (about 2 CPU-seconds each on the 2-core CI
machine, where 19 launches of those scripts spent some 90 CPU-seconds on imports alone). This launcher imports torch
and torch.distributed once and forks the ranks, as gpuval's own workloads.rank_starter does and for the same reason
(no CUDA context or torch thread exists yet at the fork). Each rank gets torchrun's environment for an env://
rendezvous on this host (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs SCRIPT
as `__main__` with ARGS. Where a rank fails the others are killed (they would wait for it in a collective), as
torchrun does, and the launcher exits with the failed rank's code. torchrun itself is tested where it is the
subject: tests/workloads/collective/test_run.py, tests/workloads/train, tests/hooks, tests/engines/test_apps_local.py.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from gpuval.workloads.rank_starter import leave

PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal a process gets when its parent dies


def command(nprocs: int, script: Path, *args: str) -> list[str]:
    """The command line that runs `script` as `nprocs` local ranks."""
    return [sys.executable, str(Path(__file__).resolve()), str(nprocs), str(script), *args]


def _be_rank(rank: int, script: Path, args: list[str]) -> None:
    """In the forked child: run the script as rank `rank`, then end with its exit code (never return)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a killed launcher takes its ranks
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
    sys.argv = [str(script), *args]
    sys.path[0] = str(script.parent)  # as `python SCRIPT` would have it
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    leave(code)  # flushed, without torch's teardown of its communication threads


def main(argv: list[str]) -> int:
    nprocs, script, args = int(argv[0]), Path(argv[1]).resolve(), argv[2:]
    importlib.import_module("torch.distributed")  # the import every rank shares, once

    from gpuval.node.dist_env import free_port

    os.environ.update(WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    sys.stdout.flush()
    ranks: dict[int, int] = {}
    for rank in range(nprocs):
        pid = os.fork()
        if pid == 0:
            _be_rank(rank, script, args)
        ranks[pid] = rank
    failed = 0
    while ranks:
        pid, status = os.waitpid(-1, 0)
        if ranks.pop(pid, None) is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        if code and not failed:
            failed = code if code > 0 else 128 - code
            for other in ranks:
                os.kill(other, signal.SIGKILL)
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
