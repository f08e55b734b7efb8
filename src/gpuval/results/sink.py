"""Where records go: the JSON Lines file, always, and the results store, when it can be reached.

The JSON Lines file is the append log that never fails for lack of a database: one O_APPEND write per record, so
concurrent writers and Ctrl-C lose nothing. The store (see results/store.py) is written next; if it cannot be
(unreachable server, a newer schema), the command goes on, says so on stderr, and `gpuval import FILE` brings the
log in later (records keep their ids, so importing twice stores one copy).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator

import platformdirs
from pydantic import ValidationError

from gpuval.errors import GpuvalError, UsageError
from gpuval.results.model import Result
from gpuval.results.pieces import record_lines


def default_results_path() -> Path:
    """GPUVAL_RESULTS, else results.jsonl in the user's data directory."""
    env = os.environ.get("GPUVAL_RESULTS")
    if env:
        return Path(env)
    return platformdirs.user_data_path("gpuval") / "results.jsonl"


def append_jsonl(records: Iterable[Result], path: Path | None = None) -> Path:
    """Append records to the JSON Lines file; each record is one O_APPEND write, flushed at once. Where the target
    is a stream (a job's stdout, which its launcher forwards in messages of 1 KiB), a longer record is written as
    pieces that each fit one message (results/pieces.py): the job's reader joins them back."""
    target = path or default_results_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            stream = not stat.S_ISREG(os.fstat(fd).st_mode)
            for record in records:
                line = record.model_dump_json() + "\n"
                for piece in record_lines(line, record.id) if stream else [line]:
                    os.write(fd, piece.encode())
        finally:
            os.close(fd)
    except OSError as exc:  # a full disk says only "No space left on device": name the file
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(target)) from None
        raise
    return target


def save_results(records: Iterable[Result], path: Path | None = None, db: str | None = None) -> Path:
    """Append records to the JSON Lines file, then to the results store (`db`, else GPUVAL_DB, else the default
    SQLite file; GPUVAL_DB=none turns it off). Returns the JSON Lines file."""
    batch = list(records)
    target = append_jsonl(batch, path)
    store_results(batch, target, db)
    return target


def store_results(records: list[Result], target: Path, db: str | None = None) -> None:
    """Write records already in the JSON Lines file `target` to the results store (see `save_results`); a store
    that cannot be written is said on stderr with the command that brings them in later."""
    from gpuval.results.store import open_store, resolve_db_url

    url = resolve_db_url(db)
    if url and records:
        try:
            open_store(url).add(records)
        except GpuvalError as exc:
            sys.stderr.write(f"warning: results kept in {target} but not in the results database: {exc}\n"
                             f"         bring them in later with: gpuval import {target}\n")


def iter_results(path: Path, on_bad: Callable[[int, str], None] | None = None) -> Iterator[Result]:
    """The records of a JSON Lines file, one line at a time. A line that is no Result (a torn last write, what a
    full disk leaves) is an error naming it, or, with `on_bad`, reported there and skipped."""
    with path.open(errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Result.model_validate_json(line)
            except (ValidationError, ValueError, RecursionError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                why = f"not a gpuval Result record ({first[:200]})"
                if on_bad is None:
                    raise UsageError(f"{path}:{lineno}: {why}") from None
                on_bad(lineno, why)


def read_results(path: Path) -> list[Result]:
    """Read every record of a JSON Lines file; a line that is no Result is an error naming the line."""
    return list(iter_results(path))
