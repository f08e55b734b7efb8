"""N local ranks forked from one starter that imported torch once: `python -m gpuval.workloads.rank_starter FOLDER
MODULE REQUEST NPROCS`.

Each rank of a local run used to be its own interpreter, and each spent 2-3 CPU-seconds importing torch (more with
a CUDA build) before it did anything: on a small machine the ranks of one bench queued behind each other's imports.
The starter imports torch and the rank's module, then forks rank 0..N-1 (fork after `import torch` is what
torch's own DataLoader workers do: no CUDA context exists yet, no thread of torch's runs). Each rank sets
torchrun's RANK and LOCAL_RANK in its environment, is named `gpuval-rank-R` (ps, top, `gpuval pin check`: its
/proc/PID/environ is the starter's, set before the fork), keeps the terminal if it is rank 0 (the others write to
/dev/null) and runs MODULE's `main([REQUEST])`.

The starter holds no rank. It ignores Ctrl-C (the ranks get it, save what they measured and end), reaps its ranks
and writes, into the ranks' shared FOLDER, `pid-R` when rank R starts and `rc-R` (its exit code, minus the signal
that killed it) when it ends. The launcher (workloads.ranks.spawn_ranks) sees each rank through `StartedRank`, which
reads those files: the part of subprocess.Popen a launcher uses, for a process that is not its child.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Mapping, NoReturn

from gpuval.errors import EXIT_CANNOT_RUN
from gpuval.node.unshadowed import child_env, module_argv
from gpuval.results.files import write_beside

STARTER = "gpuval.workloads.rank_starter"
PRELOAD = ("torch", "torch.distributed")  # what every rank imports first, and what costs


def _read(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def leave(code: int) -> NoReturn:
    """End a process that joined a process group, once its work is done and saved: flush what it printed, then
    `_exit`. Normal interpreter teardown runs the destructors of torch's still-joinable communication threads,
    which can abort the process ("terminate called without an active exception") after a successful run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _be_rank(rank: int, target: Callable[[list[str]], int], argv: list[str]) -> NoReturn:
    """In the forked child: become rank `rank`, run the module's main, end with its code (never return into the
    starter's loop)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
    try:
        Path("/proc/self/comm").write_text(f"gpuval-rank-{rank}")
    except OSError:
        pass
    if rank:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.close(quiet)
    code = EXIT_CANNOT_RUN
    try:
        code = target(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_CANNOT_RUN
    except BaseException:  # the top of a process: main() reports its own errors, this is a bug in it
        traceback.print_exc()
    leave(code)


def main(argv: list[str]) -> int:
    """The starter: preload, fork the ranks, reap them, say how each ended."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # first: a Ctrl-C during the import is the ranks' and launcher's
    folder, module, request, nprocs = Path(argv[0]), argv[1], argv[2], int(argv[3])
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # the ranks say so, one line each (require_torch)
            pass
    try:
        target = importlib.import_module(module).main
    except Exception as exc:  # a module of gpuval's own: this is a broken install
        print(f"error: cannot start ranks of {module}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    sys.stdout.flush()
    ranks: dict[int, int] = {}
    code = 0
    for rank in range(nprocs):
        try:
            pid = os.fork()
        except OSError as exc:  # out of processes or memory: the ranks started cannot finish without it
            print(f"error: could not start rank {rank} of {nprocs}: {exc.strerror or exc}", file=sys.stderr)
            for started in ranks:
                os.kill(started, signal.SIGKILL)
            code = EXIT_CANNOT_RUN
            break
        if pid == 0:
            _be_rank(rank, target, [request])
        ranks[pid] = rank
        write_beside(folder, f"pid-{rank}", str(pid))  # whole or absent: the launcher reads it at any moment
    while ranks:
        pid, status = os.waitpid(-1, 0)
        if pid in ranks:
            write_beside(folder, f"rc-{ranks.pop(pid)}", str(os.waitstatus_to_exitcode(status)))
    return code


# ---- the launcher's side ------------------------------------------------------------------------------------


class StartedRank:
    """One rank the starter forked, as its launcher sees it: pid, poll(), returncode, wait(), kill(),
    send_signal(), read from the starter's files (the rank is the starter's child, not the launcher's)."""

    def __init__(self, rank: int, folder: Path, starter: subprocess.Popen) -> None:
        self.rank, self.folder, self.starter = rank, folder, starter
        self.returncode: int | None = None
        self.lost = False  # its starter ended first: `returncode` is the starter's
        self._pid: int | None = None

    @property
    def pid(self) -> int | None:
        """The rank's pid once the starter has forked it."""
        if self._pid is None:
            self._pid = _read(self.folder / f"pid-{self.rank}")
        return self._pid

    def poll(self) -> int | None:
        """The exit code once the rank has ended (negative: the signal that killed it), else None. A starter that
        ended before saying so (killed with its ranks, or unable to import the module) speaks for the rank: its own
        code, and the rank, if it still runs, is killed (no one would report its end)."""
        if self.returncode is None:
            code = _read(self.folder / f"rc-{self.rank}")
            if code is None and self.starter.poll() is not None:
                code = _read(self.folder / f"rc-{self.rank}")
                if code is None:
                    self.send_signal(signal.SIGKILL)
                    code, self.lost = self.starter.returncode or EXIT_CANNOT_RUN, True
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the rank while it runs (a rank that ended is left alone: its pid may be another's by now)."""
        if self.returncode is None and self.pid is not None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL, as Popen.kill."""
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float) -> int:
        """The exit code, within `timeout` seconds, else subprocess.TimeoutExpired (as Popen.wait)."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank {self.rank}", timeout)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]


def start_ranks(module: str, request: Path, nprocs: int, env: Mapping[str, str],
                folder: Path) -> tuple[subprocess.Popen, list[StartedRank]]:
    """Start the starter for `nprocs` ranks of `module` (its `main([REQUEST])`) with `env` (everything but RANK and
    LOCAL_RANK, which each rank sets); returns it and a handle per rank."""
    starter = subprocess.Popen([*module_argv(STARTER), str(folder), module, str(request), str(nprocs)],
                               env=child_env(env))
    return starter, [StartedRank(rank, folder, starter) for rank in range(nprocs)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
