"""A job's output without holding all of it: lines of a file, a file followed while the job runs, and fetches of
many pieces (Kubernetes pod logs) run a bounded number at a time, handed back in order.

A 4,096-node job with NCCL_DEBUG=INFO writes gigabytes (performance review, section 7): readers take it line by
line from these iterators, and only `Engine.logs` (the CLI's `jobs logs --json`) joins it into one string.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def file_lines(path: Path) -> Iterator[str]:
    """The lines of a file, each with its line ending; nothing when the file is not there (yet)."""
    try:
        fh = open(path, errors="replace")
    except FileNotFoundError:
        return
    with fh:
        yield from fh


def follow_file(path: Path, ended: Callable[[], bool], out: TextIO, poll_s: float = 1.0) -> None:
    """Copy what the job appends to `path` onto `out` until `ended()` says the job is over, then the rest.

    Reads from where the last read stopped (no re-reading); a file that appears late is waited for.
    """
    position = 0
    while True:
        over = ended()  # asked before reading: what the job wrote before it ended is read after
        if path.exists():
            with open(path, errors="replace") as fh:
                fh.seek(position)
                for line in fh:
                    out.write(line)
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
