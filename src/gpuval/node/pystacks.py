"""The Python stacks of a process on this machine: py-spy where it can read the process, else the dump the process
writes itself on a signal (faulthandler, registered by gpuval.hooks), and THE reader of both formats.

py-spy reads another process's memory (process_vm_readv, the ptrace permission: the same user without Yama's
ptrace_scope, or root; in a container CAP_SYS_PTRACE). It runs with `--nonblocking`: a hung rank need not be paused,
and one stopped by SIGSTOP cannot be (py-spy's pause fails on it). faulthandler's dump needs the process to run its
signal handler, which a stopped process cannot: its state says so instead. The signal goes through a pidfd the
caller opened before it checked the process (`DumpRequest`): it reaches that process or none, never one that took
its pid since; the dump is read from a file the caller opened and checked, and at most MAX_DUMP bytes of it.

py-spy `dump` text:            Thread 4242 (idle): "MainThread"
                                   all_reduce (torch/distributed/distributed_c10d.py:2950)
faulthandler text (3.8-3.13):  Current thread 0x00007f3b6d3e8740 (most recent call first):
                                 File "/x/train.py", line 41 in step
Each thread's frames are kept innermost first.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

_PYSPY_THREAD = re.compile(r'^Thread (\S{1,32}) \(([^)]{0,64})\)(?:: "([^"]{0,256})")?\s*$')
_FH_THREAD = re.compile(r"^(Current thread|Thread|Stack) ?(0x[0-9a-fA-F]{1,16})? ?\(most recent call first\):\s*$")
MAX_DUMP = 1 << 20  # bytes of a faulthandler dump read: every thread of a large program, not a flood
STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped by a tracer",
          "Z": "a zombie", "X": "dead", "I": "idle"}


class Frame(BaseModel):
    """One Python (or, with py-spy --native, native) frame."""

    function: str
    file: str = ""
    line: int | None = None


class ThreadStack(BaseModel):
    """One thread: its id as the tool prints it, its name (py-spy), state (py-spy: idle, active, gil) and frames,
    innermost first; `current`: the thread that ran the signal handler (faulthandler)."""

    thread: str
    name: str = ""
    state: str = ""
    current: bool = False
    frames: list[Frame] = Field(default_factory=list)


class Stacks(BaseModel):
    """A process's stacks and where they came from; `problem` says why there are none (or why py-spy was not it)."""

    source: str  # "py-spy", "faulthandler", or "" (none read)
    threads: list[ThreadStack] = Field(default_factory=list)
    problem: str = ""

    def main_thread(self) -> ThreadStack | None:
        """The thread a training loop runs on: py-spy's MainThread, else the one whose outermost frame is a module
        (`<module>`), else faulthandler's current thread, else the first."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        for thread in self.threads:
            if thread.frames and thread.frames[-1].function == "<module>":
                return thread
        return next((t for t in self.threads if t.current), self.threads[0] if self.threads else None)


def read_pyspy(text: str) -> list[ThreadStack]:
    """The threads of a `py-spy dump` text (the Process and Python header lines and `--locals` lines are passed
    over)."""
    threads: list[ThreadStack] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _PYSPY_THREAD.match(line):
            threads.append(ThreadStack(thread=m.group(1), state=m.group(2), name=m.group(3) or ""))
        elif threads and (frame := _pyspy_frame(line)):
            threads[-1].frames.append(frame)
    return threads


def _pyspy_frame(line: str) -> Frame | None:
    """`    function (file:line)`, indented by four spaces (deeper lines are --locals' arguments)."""
    if not (line.startswith("    ") and line[4:5].strip() and line.endswith(")")) or " (" not in line:
        return None
    function, _, where = line[4:-1].rpartition(" (")
    file, _, number = where.rpartition(":")
    if number.isdigit():
        return Frame(function=function, file=file, line=int(number))
    return Frame(function=function, file=where)


def _fh_frame(line: str) -> Frame | None:
    """`  File "path", line N in function`."""
    if not line.startswith('  File "'):
        return None
    file, _, rest = line[8:].rpartition('", line ')
    number, _, function = rest.partition(" in ")
    return Frame(function=function, file=file, line=int(number)) if file and number.isdigit() else None


def read_faulthandler(text: str) -> list[ThreadStack]:
    """The threads of a faulthandler dump (`dump_traceback` and the dump on a registered signal)."""
    threads: list[ThreadStack] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r\n")
        if m := _FH_THREAD.match(line):
            threads.append(ThreadStack(thread=m.group(2) or "", current=m.group(1) != "Thread"))
        elif threads and (frame := _fh_frame(line)):
            threads[-1].frames.append(frame)
    return threads


def process_state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T, Z, ...) from /proc/PID/stat, None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:]
    return rest[:1] or None


def pyspy_path() -> str | None:
    """The py-spy program: beside this Python (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def pyspy_stacks(pid: int, timeout_s: float = 10.0, program: str | None = None) -> Stacks:
    """The process's stacks read by py-spy (`dump --nonblocking`); `problem` says why not (not installed, no
    permission to read the process, no answer in time)."""
    exe = program or pyspy_path()
    if exe is None:
        return Stacks(source="", problem="py-spy is not installed (pip install py-spy)")
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True,
                              timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Stacks(source="", problem=f"py-spy did not answer within {timeout_s:g} s")
    except OSError as exc:
        return Stacks(source="", problem=f"py-spy cannot run: {exc.strerror}")
    threads = read_pyspy(done.stdout)
    if done.returncode != 0 or not threads:
        said = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[0]
        return Stacks(source="", problem=f"py-spy cannot read process {pid}: {said[:300]}")
    return Stacks(source="py-spy", threads=threads)


@dataclass(frozen=True)
class DumpRequest:
    """How to ask a process for its own stacks: a pidfd of it (opened before the process was checked), the signal it
    registered, and a descriptor of the dump file it writes to, opened by the caller (who closes both)."""

    pidfd: int
    signum: int
    dump: int


def signalled_stacks(pid: int, ask: DumpRequest, timeout_s: float = 10.0) -> Stacks:
    """The dump the process writes on `ask.signum` (faulthandler): the signal is sent through the pidfd, and what the
    dump file gains is read once it stops growing. Only for a process that registered that signal (its state file
    says so): the default action of an unhandled one ends the process."""
    fd = ask.dump
    try:
        before = os.fstat(fd).st_size
        signal.pidfd_send_signal(ask.pidfd, ask.signum)
    except OSError as exc:
        return Stacks(source="", problem=f"cannot ask process {pid} for its stacks: {exc.strerror}")
    deadline, size, settled = time.monotonic() + timeout_s, before, 0
    while time.monotonic() < deadline and settled < 3:  # three unchanged looks, 50 ms apart: the dump is whole
        time.sleep(0.05)
        now = os.fstat(fd).st_size
        settled = settled + 1 if now == size and now > before else 0
        size = now
    if size <= before:
        return Stacks(source="", problem=f"process {pid} wrote no stacks within {timeout_s:g} s of the signal")
    text = os.pread(fd, min(size - before, MAX_DUMP), before).decode("utf-8", "replace")
    return Stacks(source="faulthandler", threads=read_faulthandler(text))


def process_stacks(pid: int, ask: DumpRequest | None = None, timeout_s: float = 10.0,
                   not_asked: str = "no stack-dump signal registered (gpuval.hooks)") -> Stacks:
    """A process's stacks: py-spy, else (`ask`: a registered signal, a process that can run its handler) its own
    dump; else why neither could be had (`not_asked`: why there is no `ask`)."""
    first = pyspy_stacks(pid, timeout_s)
    if first.threads:
        return first
    state = process_state(pid)
    if state is None:
        return Stacks(source="", problem=f"{first.problem}; process {pid} is gone")
    if state in ("T", "t"):
        return Stacks(source="", problem=f"{first.problem}; process {pid} is {STATES[state]}: it cannot run the "
                                         "handler that dumps its stacks")
    if ask is None:
        return Stacks(source="", problem=f"{first.problem}; {not_asked}")
    second = signalled_stacks(pid, ask, timeout_s)
    return second if second.threads else Stacks(source="", problem=f"{first.problem}; {second.problem}")
