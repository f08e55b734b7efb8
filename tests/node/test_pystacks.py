"""A process's Python stacks: the reader of py-spy's and faulthandler's text on stacks recorded from a real hung
gloo job (tests/data/stacks/SOURCE.md), and live processes here: py-spy reads a running and a stopped process, a
process's own faulthandler dump on its signal where py-spy cannot be had (the signal sent through a pidfd, so a
process that ended is never mistaken for whoever took its pid), and why neither could be, said."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from gpuval.node.pystacks import (DumpRequest, Stacks, process_stacks, process_state, pyspy_path, pyspy_stacks,
                                  read_faulthandler, read_pyspy, signalled_stacks)

DATA = Path(__file__).resolve().parent.parent / "data" / "stacks"
SLEEPER = """
import faulthandler, signal, sys, threading, time
if len(sys.argv) > 1:
    handle = open(sys.argv[1], "w")
    faulthandler.register(signal.SIGRTMIN + 5, file=handle, all_threads=True)
def nap():
    time.sleep(120)
threading.Thread(target=nap, name="helper", daemon=True).start()
print("ready", flush=True)
nap()
"""


def test_pyspy_text_of_a_rank_waiting_in_backward():
    (thread,) = read_pyspy((DATA / "pyspy-waiting-rank.txt").read_text())
    assert (thread.name, thread.state) == ("MainThread", "idle")
    assert [f.function for f in thread.frames] == ["_engine_run_backward", "backward", "Tensor.backward", "main",
                                                    "<module>"]
    assert (thread.frames[0].file, thread.frames[0].line) == ("torch/autograd/graph.py", 979)


def test_pyspy_text_of_a_rank_in_all_reduce_and_of_a_stopped_one():
    (thread,) = read_pyspy((DATA / "pyspy-plain-all-reduce.txt").read_text())
    assert thread.frames[0].function == "all_reduce"
    assert thread.frames[1].function == "_exception_logger.<locals>.wrapper"
    (stopped,) = read_pyspy((DATA / "pyspy-stopped-rank.txt").read_text())
    assert [(f.function, f.line) for f in stopped.frames] == [("main", 44), ("<module>", 61)]


def test_faulthandler_text():
    (thread,) = read_faulthandler((DATA / "faulthandler-waiting-rank.txt").read_text())
    assert thread.current and thread.thread == "0x00007fa15982db80"
    assert thread.frames[0].function == "_engine_run_backward" and thread.frames[0].line == 979
    assert Stacks(source="faulthandler", threads=[thread]).main_thread() is thread


def test_lines_of_neither_format_are_no_frames():
    assert read_pyspy("Thread 1 (idle)\n        Arguments:\n    not a frame\n  (x:1)\n")[0].frames == []
    assert read_faulthandler('Stack (most recent call first):\n  File "x.py", line ? in f\n')[0].frames == []


@contextmanager
def _ask(pid: int, path: Path) -> Iterator[DumpRequest]:
    """A request for the process's own dump: a pidfd of it, its signal, its dump file open for reading."""
    pidfd, dump = os.pidfd_open(pid), os.open(path, os.O_RDONLY)
    try:
        yield DumpRequest(pidfd, int(signal.SIGRTMIN + 5), dump)
    finally:
        os.close(pidfd)
        os.close(dump)


def _stop(pid: int) -> None:
    """SIGSTOP, then wait until /proc says stopped (the signal is delivered asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while process_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process_state(pid) == "T"


@pytest.fixture
def sleeper(tmp_path):
    """A Python process asleep in `nap`, with a helper thread; its faulthandler dumps to a file on SIGRTMIN+5."""
    path = tmp_path / "stacks"
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc, path
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


@pytest.mark.skipif(pyspy_path() is None, reason="py-spy is a test dependency (pip install py-spy)")
def test_pyspy_reads_a_running_and_a_stopped_process(sleeper):
    proc, _ = sleeper
    stacks = pyspy_stacks(proc.pid)
    assert stacks.source == "py-spy", stacks.problem
    main = stacks.main_thread()
    assert main is not None and main.frames[0].function == "nap" and main.frames[-1].function == "<module>"
    assert {t.name for t in stacks.threads} == {"MainThread", "helper"}
    _stop(proc.pid)
    assert process_stacks(proc.pid).source == "py-spy"  # it reads a stopped process (--nonblocking)


def test_without_pyspy_the_process_dumps_its_own_stacks(sleeper, monkeypatch):
    proc, path = sleeper
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")  # py-spy beside it: not there
    monkeypatch.setenv("PATH", "/nonexistent")
    with _ask(proc.pid, path) as ask:
        stacks = process_stacks(proc.pid, ask, timeout_s=10)
    assert stacks.source == "faulthandler", stacks.problem
    assert {f.function for t in stacks.threads for f in t.frames} >= {"nap", "<module>"}
    assert len(stacks.threads) == 2


def test_why_no_stacks_could_be_had_is_said(sleeper, monkeypatch):
    proc, path = sleeper
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    unregistered = process_stacks(proc.pid)
    assert unregistered.source == "" and "py-spy is not installed" in unregistered.problem
    assert "no stack-dump signal registered" in unregistered.problem
    _stop(proc.pid)
    with _ask(proc.pid, path) as ask:
        stopped = process_stacks(proc.pid, ask, timeout_s=2)
        assert "is stopped: it cannot run the handler" in stopped.problem and not path.read_text()
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()
        assert "is gone" in process_stacks(proc.pid).problem
        # its pid is free for any process now: the signal goes to the one the pidfd holds, which ended, or to none
        assert "cannot ask process" in signalled_stacks(proc.pid, ask, timeout_s=1).problem
    assert "py-spy cannot run" in pyspy_stacks(proc.pid, program="/dev/null").problem


def test_a_process_that_never_answers_the_signal(tmp_path, monkeypatch):
    """A process that ignores the signal (its handler is not faulthandler's) writes nothing: said, within the
    timeout."""
    code = "import signal, time; signal.signal(signal.SIGRTMIN + 5, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        assert proc.stdout.readline().strip() == "ready"
        path = tmp_path / "stacks"
        path.write_text("")
        start = time.monotonic()
        with _ask(proc.pid, path) as ask:
            stacks = process_stacks(proc.pid, ask, timeout_s=1)
        assert stacks.source == "" and "wrote no stacks within 1 s" in stacks.problem
        assert time.monotonic() - start < 10
    finally:
        proc.kill()
        proc.wait()
