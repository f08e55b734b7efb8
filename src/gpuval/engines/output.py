"""A job's output without holding all of it: lines of a file, a file followed while the job runs, fetches of
many pieces (Kubernetes pod logs) run a bounded number at a time, handed back in order, and the lines that say why
a failed job failed.

A 4,096-node job with NCCL_DEBUG=INFO writes gigabytes: readers take it line by
line from these iterators, and only `Engine.logs` (the CLI's `jobs logs --json`) joins it into one string.

A job's output file is its user's: its path may be one the user chose (`sbatch -o`), so it is read only as the
user's own regular file (`open_output`: no symlink followed, no FIFO or device opened for reading, owned by the
job's user where the engine knows that user), and no line of it is held longer than LINE_BYTES.
"""

from __future__ import annotations

import errno
import io
import os
import re
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO, TypeVar

from gpuval.results.files import open_regular, skip_line

T = TypeVar("T")
R = TypeVar("R")


# A line ends at "\n" only: universal newlines (newline=None, and newline="" too) would also end one at a bare
# "\r", and a task printing `junk\r0: {...}` would start a line under another task's srun label.
NEWLINE = "\n"


def text_lines(text: str) -> list[str]:
    """The lines of a text in hand (a command's output), each with its line ending, split only at a newline (never
    at the "\\r", form feeds or separators str.splitlines also ends a line at)."""
    return io.StringIO(text, newline=NEWLINE).readlines()


LINE_BYTES = 1 << 20  # of one line read from a file: a longer one is cut there, its rest passed over unheld


def file_lines(path: Path, owner: int | None = None) -> Iterator[str]:
    """The lines of a file, each with its line ending, split only at a newline, none longer than LINE_BYTES;
    nothing when the file is not there (yet). The file is opened only as a regular file and, with `owner`, only
    when that uid owns it (`open_output`): a job's output path is its user's to choose."""
    try:
        fh = open_output(path, owner)
    except FileNotFoundError:
        return
    with fh:
        yield from _bounded_lines(fh)


def open_output(path: Path, owner: int | None = None) -> BinaryIO:
    """`path` opened for reading as a job's output may be: a regular file (results.files.open_regular: a symlink at
    its name is not followed, a FIFO or a device is refused before a byte is read) and, with `owner`, one that uid
    owns (a job's output file is created by and for its user; a path a user points at another account's file is
    not read with the reader's rights). FileNotFoundError as usual; every refusal is an OSError naming the file."""
    fh = open_regular(path)
    found = os.fstat(fh.fileno()).st_uid
    if owner is not None and found != owner:
        fh.close()
        raise OSError(errno.EACCES, f"owned by uid {found}, not by the job's user (uid {owner}): not read", str(path))
    return fh


def _bounded_lines(fh: BinaryIO) -> Iterator[str]:
    while raw := fh.readline(LINE_BYTES):
        if len(raw) >= LINE_BYTES and not raw.endswith(b"\n"):
            skip_line(fh, LINE_BYTES)
            raw += b"\n"
        yield raw.decode(errors="replace")


def follow_file(path: Path, ended: Callable[[], bool], out: TextIO, poll_s: float = 1.0,
                owner: int | None = None) -> None:
    """Copy what the job appends to `path` onto `out` until `ended()` says the job is over, then the rest.

    Reads from where the last read stopped (no re-reading); a file that appears late is waited for. It is opened
    as `file_lines` opens it (`open_output`), each time, and its lines are bounded as there.
    """
    position = 0
    while True:
        over = ended()  # asked before reading: what the job wrote before it ended is read after
        try:
            fh = open_output(path, owner)
        except FileNotFoundError:
            fh = None
        if fh is not None:
            with fh:
                fh.seek(position)
                out.writelines(_bounded_lines(fh))
                position = fh.tell()
            out.flush()
        if over:
            return
        time.sleep(poll_s)


def ordered_map(func: Callable[[T], R], items: Iterable[T], width: int) -> Iterator[R]:
    """func(item) for every item, at most `width` running at once, results in the order of `items`.

    At most `width` results wait in memory: the next item starts only as the oldest result is handed on, so a
    slow reader holds back the fetching instead of piling results up. An exception in func is raised here, in
    order; what is still running when the caller stops is waited for, what has not started is dropped.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    source = iter(items)
    pool = ThreadPoolExecutor(max_workers=width)
    pending: deque[Future[R]] = deque()
    try:
        for item in source:
            pending.append(pool.submit(func, item))
            if len(pending) == width:
                break
        while pending:
            done = pending.popleft()
            following = next(source, _END)
            if following is not _END:
                pending.append(pool.submit(func, following))  # type: ignore[arg-type]
            yield done.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_END = object()


# What says why a job failed: Slurm's and MPI's complaints, "error:" lines, a rank killed by a signal (any case),
# and a traceback's last line, the exception (a class name: case matters, "no errors" is not one). Matched on each
# line alone, so the output is read once, streaming.
_TELLING = re.compile(
    r"\berror\s*:|\bInvalid MPI type\b|\bMPI_ABORT\b|\bPMIX? ERROR\b|\bmpirun noticed\b|\bORTE has lost\b"
    r"|\bSegmentation fault\b|\bcore dumped\b|\bKilled\b|\bexited on signal\b|\bCANCELLED AT\b"
    r"|\bDUE TO TIME LIMIT\b",
    re.IGNORECASE,
)
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b(?::|$)")
LINE_CHARS = 300  # one shown line at most: a line of a million characters is still one screen line


def failure_lines(lines: Iterable[str], keep: int = 8, tail: int = 3) -> list[str]:
    """The last `keep` distinct lines of a job's output that say why it failed (srun's and MPI's errors, "error:"
    lines, a traceback's exception line), in the order they came; where none does, the output's last `tail`
    non-blank lines. Read once, line by line: a job's gigabytes of output are never held."""
    found: dict[str, None] = {}  # insertion-ordered; a line seen again moves to the end (srun repeats per task)
    last: deque[str] = deque(maxlen=tail)
    for raw in lines:
        text = raw.strip()[:LINE_CHARS]
        if not text:
            continue
        last.append(text)
        if _telling(text):
            found.pop(text, None)
            found[text] = None
            if len(found) > keep:
                del found[next(iter(found))]
    return list(found) or list(last)


def _telling(text: str) -> bool:
    return bool(_TELLING.search(text) or _EXCEPTION.search(text))
