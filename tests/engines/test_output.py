"""The output helpers for real: files read line by line, a file followed while another process writes it, and
ordered_map's bounds (never more than `width` calls at once or results waiting) and order (the input's)."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from gpuval.engines.output import (
    LINE_BYTES, LINE_CHARS, failure_lines, file_lines, follow_file, ordered_map, text_lines,
)
from gpuval.engines.probe import answered


def test_file_lines_keeps_line_endings_and_a_missing_file_is_empty(tmp_path):
    path = tmp_path / "out.log"
    assert list(file_lines(path)) == []
    path.write_bytes(b"one\ntwo\n\xffthree")
    assert list(file_lines(path)) == ["one\n", "two\n", "\ufffdthree"]


def test_a_line_ends_only_at_a_newline(tmp_path):
    """A bare carriage return (or any other character str.splitlines would split at) is inside a line: a task
    that prints `junk\\r0: {...}` under srun --label must not make a second line that starts with another task's
    label. A CRLF line keeps its CR."""
    path = tmp_path / "out.log"
    path.write_bytes(b"2: junk\r0: {forged}\n1: a\x0bb\xe2\x80\xa8c\r\n")
    assert list(file_lines(path)) == ["2: junk\r0: {forged}\n", "1: a\x0bb\u2028c\r\n"]
    out = io.StringIO()
    follow_file(path, lambda: True, out, poll_s=0)
    assert out.getvalue() == "2: junk\r0: {forged}\n1: a\x0bb\u2028c\r\n"  # copied as written, nothing translated


def test_a_commands_output_in_hand_is_split_at_newlines_only():
    """The same rule for output read whole (a probe's srun, a pod's exec or log): str.splitlines would make three
    lines of the first, and a probe's answer would be read apart."""
    text = "gpuval-probe {x}\rjunk\x0bmore\u2028end\nlast"
    assert text_lines(text) == ["gpuval-probe {x}\rjunk\x0bmore\u2028end\n", "last"]
    failed = answered("n1", text, "\rTraceback\nboom\n", 1, "srun on n1", 60)
    assert failed.lines == text_lines(text) and failed.problem == "srun on n1: exit 1: Traceback"
    assert answered("n1", "", "", None, "exec in pod p", 60).problem == "exec in pod p: no end in 60 s"


def test_follow_file_copies_what_a_running_process_appends(tmp_path):
    path = tmp_path / "out.log"
    proc = subprocess.Popen(["sh", "-c", f"for i in 1 2 3; do echo line $i >> {path}; sleep 0.2; done"])
    out = io.StringIO()
    follow_file(path, lambda: proc.poll() is not None, out, poll_s=0.05)
    assert out.getvalue() == "line 1\nline 2\nline 3\n"


def _refused(path, owner=None) -> str:
    """What file_lines and follow_file say of `path`: both refuse it at once, with the same OSError."""
    with pytest.raises(OSError) as lines:
        list(file_lines(path, owner))
    with pytest.raises(OSError) as followed:
        follow_file(path, lambda: True, io.StringIO(), poll_s=0, owner=owner)
    assert lines.value.filename == followed.value.filename == str(path)
    return lines.value.strerror


def test_d9_a_fifo_a_device_or_a_symlink_is_refused_before_a_byte_is_read(tmp_path):
    """reliability-4 D9: a job's output path that is /dev/zero grew the reader until it ran out of memory, a FIFO
    hung it for good, a symlink was followed. Each is now refused at once: opened without following a link and
    without waiting for a writer, and read only when it is a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real.log")
    (tmp_path / "real.log").write_text("secret\n")
    assert "not a regular file" in _refused(fifo) and "not a regular file" in _refused(Path("/dev/zero"))
    assert "symbolic link" in _refused(link)


def test_d9_an_output_file_is_read_only_when_the_jobs_user_owns_it(tmp_path):
    """A job's user chooses its output path; where it names a file another account owns, that file is not read
    with the reader's (the operator's) rights."""
    path = tmp_path / "out.log"
    path.write_text("hello\n")
    assert list(file_lines(path, owner=os.getuid())) == ["hello\n"]
    assert f"not by the job's user (uid {os.getuid() + 1})" in _refused(path, owner=os.getuid() + 1)


def test_d9_a_line_longer_than_the_bound_is_cut_and_its_rest_never_held(tmp_path):
    """reliability-4 D10: one 400 MB line without a newline held 827 MB. A line is cut at LINE_BYTES and the rest
    passed over in pieces of that size: 64 MB of one line cost a few MB."""
    path = tmp_path / "out.log"
    with open(path, "wb") as fh:
        fh.write(b"first\n")
        for _ in range(64):
            fh.write(b"x" * (1 << 20))
        fh.write(b"\nlast\n")
    tracemalloc.start()
    try:
        lines = [len(line) for line in file_lines(path)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [6, LINE_BYTES + 1, 5] and peak < 8 * LINE_BYTES, peak


def test_ordered_map_is_bounded_and_in_order():
    width, running, most, lock = 4, 0, 0, threading.Lock()

    def slow(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02 if i % 3 else 0.05)  # later items often finish first
        with lock:
            running -= 1
        return i * i

    started = time.monotonic()
    assert list(ordered_map(slow, range(40), width)) == [i * i for i in range(40)]
    assert most == width
    assert time.monotonic() - started < 40 * 0.03  # concurrent: well under the serial time


def test_ordered_map_holds_back_when_the_reader_is_slow():
    """No more than `width` calls start ahead of what the reader has taken."""
    started: list[int] = []
    results = ordered_map(lambda i: started.append(i) or i, range(100), 3)
    assert next(results) == 0
    time.sleep(0.1)
    assert len(started) <= 4
    results.close()


def test_ordered_map_raises_the_first_error_in_order():
    def boom(i: int) -> int:
        if i == 5:
            raise RuntimeError("pod 5")
        return i

    seen = []
    with pytest.raises(RuntimeError, match="pod 5"):
        for value in ordered_map(boom, range(10), 4):
            seen.append(value)
    assert seen == [0, 1, 2, 3, 4]


def test_failure_lines_keep_what_says_why_once_each_in_order():
    out = ["rank 0 starting\n", "no errors so far\n", "srun: error: task 1 launch failed\n",
           "Traceback (most recent call last):\n", '  File "w.py", line 9, in <module>\n',
           "    raise ValueError(\"bad size\")\n", "ValueError: bad size\n",
           "srun: error: task 1 launch failed\n",  # srun says it again for another task: kept once, at its last place
           "slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT 2026-11-26T05:00:00 ***\n", "done\n"]
    assert failure_lines(out) == ["ValueError: bad size", "srun: error: task 1 launch failed",
                                  "slurmstepd: error: *** STEP 7.0 ON n1 CANCELLED AT 2026-11-26T05:00:00 ***"]


def test_failure_lines_are_bounded_and_fall_back_to_the_last_lines():
    many = [f"error: number {i}\n" for i in range(100)]
    assert failure_lines(iter(many), keep=8) == [f"error: number {i}" for i in range(92, 100)]
    assert failure_lines(["step 1\n", "\n", "step 2\n", "step 3\n", "the node went away\n"]) == \
        ["step 2", "step 3", "the node went away"]  # nothing says why: the output's last lines
    assert failure_lines(["error: " + "x" * 10_000]) == ["error: " + "x" * (LINE_CHARS - 7)]
    assert failure_lines([]) == []
