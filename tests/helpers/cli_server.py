"""`python -m gpuval ARGS`, each call its own process, forked from one that already imported gpuval.

A fresh interpreter spends most of a CPU-second importing typer, pydantic, SQLAlchemy, rich and gpuval's own modules
before gpuval reads its command line, and the suite starts gpuval some five hundred times on two cores. Here a server
process imports those modules once and forks one child per call. The child takes the call's arguments, environment,
working directory (standard input is /dev/null, where a fresh subprocess would inherit the worker's: no command
reads it), runs gpuval's `__main__` as `python -m` does, runs the exit handlers and exits
with gpuval's code; the caller gets a `subprocess.CompletedProcess` as from `subprocess.run`. What runs is the real
command line in a process of its own; only imports were done before it started.

Why that is the same program: no gpuval module reads the environment, the clock or its process when imported
(tests/test_cli_server.py holds that), and the command modules register nothing until `main` runs in the child.
Where a call could differ, it runs as a plain subprocess instead: when its environment differs from the server's in
what an interpreter reads as it starts (PYTHON*: the path, a sitecustomize, warnings, encodings; LANG and LC_*) or
in what the two rich consoles gpuval makes at import read then (COLUMNS, NO_COLOR, ...); and when the server is busy
(a test that runs commands from threads).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from gpuval.cli import COMMANDS

# Imported once in the server: the command line, each command's module and what most calls go on to import.
PRELOAD = ("gpuval.cli", *(f"gpuval.cli.{module}" for module in COMMANDS.values()), "gpuval.cli.render",
           "gpuval.workloads.health.run", "gpuval.workloads.health.finish", "gpuval.results.store",
           "alembic.command", "sqlalchemy.orm")
# What rich's consoles read when gpuval's modules make them (at import, in the server); with STARTUP_PREFIXES, what a
# call's environment must share with the server's to be forked.
CONSOLE_VARIABLES = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES", "NO_COLOR", "FORCE_COLOR", "TERM",
                     "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM_PROGRAM")
STARTUP_PREFIXES = ("PYTHON", "LANG", "LC_")  # what an interpreter reads as it starts

_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, traceback
for name in sys.argv[1].split(","):
    importlib.import_module(name)
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w", buffering=1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0); os.dup2(null, 1)
for line in requests:
    call = json.loads(line)
    pid = os.fork()
    if pid == 0:
        requests.close(); replies.close()
        for fd, path, flags in ((0, call["stdin"], os.O_RDONLY), (1, call["stdout"], os.O_WRONLY),
                                (2, call["stderr"], os.O_WRONLY)):
            os.dup2(os.open(path, flags), fd)
        sys.stdin = open(0, "r", closefd=False)
        # line by line under PYTHONUNBUFFERED (as -u's text layer writes; the call shares the server's)
        sys.stdout = open(1, "w", buffering=1 if call["env"].get("PYTHONUNBUFFERED") else -1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        os.environ.clear(); os.environ.update(call["env"]); os.chdir(call["cwd"])
        sys.argv = ["gpuval", *call["args"]]
        code = 0
        try:
            runpy.run_module("gpuval", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(code)
    replies.write(f"{pid}\n")
    _, status = os.waitpid(pid, 0)
    replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
"""


def _read_early(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment read before gpuval's command runs: at interpreter start, or by the consoles."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in CONSOLE_VARIABLES}


def _plain(args: list[str], env: dict[str, str], timeout: float, cwd: Path | None) -> subprocess.CompletedProcess:
    """The call as a fresh interpreter (where the server cannot take it)."""
    return subprocess.run([sys.executable, "-m", "gpuval", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)


class CliServer:
    """One fork server (per pytest worker); `run` is `subprocess.run([python, -m, gpuval, *args], ...)`."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._server_env: dict[str, str] = {}

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._server_env = _read_early(os.environ)
            self._proc = subprocess.Popen([sys.executable, "-c", _SERVER, ",".join(PRELOAD)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, bufsize=1)
        return self._proc

    def close(self) -> None:
        """End the server (its stdin closed: it finishes the loop and exits)."""
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=30)

    def _discard(self, pid: int | None) -> None:
        """After a call cut short on this side (pytest's timeout, Ctrl-C): its process and the server go, so that
        no reply of this call is read as the next call's; the next call starts a new server."""
        for victim in (pid, self._proc.pid if self._proc else None):
            if victim:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._proc is not None:
            self._proc.wait()
            self._proc = None

    def run(self, args: list[str], env: dict[str, str], timeout: float, cwd: Path | None) -> subprocess.CompletedProcess:
        """Run one call; a busy server (another thread's call), or an environment that differs from the server's in
        what is read before gpuval's command runs, leaves it to a plain subprocess."""
        if not self._lock.acquire(blocking=False):
            return _plain(args, env, timeout, cwd)
        try:
            server = self._start()
            if _read_early(env) != self._server_env:
                return _plain(args, env, timeout, cwd)
            with tempfile.TemporaryDirectory(prefix="gpuval-call-") as tmp:
                return self._call(server, args, env, timeout, cwd, Path(tmp))
        finally:
            self._lock.release()

    def _call(self, server: subprocess.Popen, args: list[str], env: dict[str, str], timeout: float,
              cwd: Path | None, tmp: Path) -> subprocess.CompletedProcess:
        assert server.stdin is not None and server.stdout is not None
        out, err = tmp / "stdout", tmp / "stderr"
        out.touch()
        err.touch()
        pid = None
        try:
            server.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd or os.getcwd()),
                                           "stdin": os.devnull, "stdout": str(out), "stderr": str(err)}) + "\n")
            server.stdin.flush()
            pid = int(server.stdout.readline())
            code = self._wait(server, pid, timeout)
        except BaseException:
            self._discard(pid)
            raise
        command = [sys.executable, "-m", "gpuval", *args]
        if code is None:
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(errors="replace"),
                                            err.read_text(errors="replace"))
        return subprocess.CompletedProcess(command, code, out.read_text(errors="replace"),
                                           err.read_text(errors="replace"))

    @staticmethod
    def _wait(server: subprocess.Popen, pid: int, timeout: float) -> int | None:
        """The call's exit code (negative: killed by that signal), or None when it ran past `timeout` (killed)."""
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(server.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            os.kill(pid, signal.SIGKILL)
            reader.join()
            return None
        return int(result[0])
