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
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import platformdirs
from pydantic import ValidationError

from gpuval.errors import GpuvalError, UsageError
from gpuval.results.files import open_regular, skip_line
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
        fd = _shared_stdout(os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
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


def _shared_stdout(fd: int) -> int:
    """`fd`, or this process's stdout where `fd` opened the same file (`--results /dev/stdout` with stdout on a
    file): a second open of a file keeps an offset of its own, so the table printed on stdout next would overwrite
    the records; through stdout's own descriptor, after what was printed before, they stay in order."""
    try:
        same = os.path.samestat(os.fstat(fd), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # no stdout (closed, or replaced by an object without a descriptor)
        return fd
    if not same:
        return fd
    os.close(fd)
    sys.stdout.flush()
    return os.dup(sys.stdout.fileno())


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


_FIRST_KEY = b'{"schema_version"'  # how every record gpuval writes begins (Result's first field)
MAX_LINE = 16 * 1024 * 1024  # a longer line is no record gpuval wrote: skipped without being held whole
_MARK = 96  # bytes of the last line read kept to know the file again (its record id is within them)
BadLine = Callable[[int, str], None]


def parse_line(raw: bytes) -> tuple[Result | None, str]:
    """(the record, "") or (None, why it is none). Bytes that are no UTF-8 inside a string are read as U+FFFD, as
    a text reader would: the record is kept."""
    try:
        return Result.model_validate_json(raw), ""
    except (ValidationError, ValueError, RecursionError) as exc:
        text = raw.decode("utf-8", errors="replace")
        if text.encode() != raw:
            try:
                return Result.model_validate_json(text), ""
            except (ValidationError, ValueError, RecursionError):
                pass
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"not a gpuval Result record ({first[:200]})"


@dataclass
class JsonlReader:
    """THE reader of a JSON Lines file of records, kept between reads: each `read` goes on from the byte where the
    last one stopped, so a long log is read once, however often it is asked (the exporter's scrapes, a run's own
    records after it). The file is opened only as a regular file (`files.open_regular`: no symlink followed, a
    FIFO or device refused before a byte is read).

    - A file replaced since the last read is read from its start: a new file at the name (rotated by rename), a
      shorter one (truncated), or one whose bytes where the last read line began are no longer that line
      (copytruncate, then more written than was read before).
    - A line that is no record (a torn write, what a full disk leaves, a line damaged by hand) is counted in
      `skipped` and told to `on_bad(line number, why)`, never an end to the reading; where a torn write has the
      next record glued to it without a newline, that record is whole and is read. A line over MAX_LINE is
      skipped without being held.
    - The last line without its newline is left for the next read (it may still be being written), unless the
      read is `final` (the file is complete: a one-off read)."""

    path: Path
    offset: int = 0
    skipped: int = 0
    missing_ok: bool = True  # a file not written yet holds no record; else a one-line error
    lineno: int = 0  # lines read from the file's start (counted when reading began at 0)
    _identity: tuple[int, int] | None = None
    _mark: tuple[int, bytes] = (0, b"")  # where the last line read began, and its first bytes

    def read(self, final: bool = False, on_bad: BadLine | None = None,
             wanted: Callable[[bytes], bool] | None = None) -> Iterator[Result]:
        """The records written since the last read, one at a time (a first read of a long file is never held
        whole). `wanted`: a cheap test of a line's bytes; a line it refuses is passed over unparsed (a reader that
        needs a few kinds of record of a file of many)."""
        try:
            fh = open_regular(self.path)
        except FileNotFoundError:
            if self.missing_ok:
                return
            raise UsageError(f"{self.path}: cannot read (no such file)") from None
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        with fh:
            self._from_start_if_replaced(fh)
            fh.seek(self.offset)
            yield from self._records(fh, final, on_bad, wanted)

    def _from_start_if_replaced(self, fh: BinaryIO) -> None:
        info = os.fstat(fh.fileno())
        identity = (info.st_dev, info.st_ino)
        known = self._identity is None or identity == self._identity  # a first read trusts the offset it is given
        start, head = self._mark
        if head:
            fh.seek(start)
            known = known and fh.read(len(head)) == head
        if not known or info.st_size < self.offset:
            self.offset, self.lineno, self._mark = 0, 0, (0, b"")
        self._identity = identity

    def _records(self, fh: BinaryIO, final: bool, on_bad: BadLine | None,
                 wanted: Callable[[bytes], bool] | None) -> Iterator[Result]:
        while True:
            raw = fh.readline(MAX_LINE)
            whole = raw.endswith(b"\n")
            if not whole and len(raw) >= MAX_LINE:  # a monster line: skipped to its end without holding it
                self.offset += len(raw) + skip_line(fh, MAX_LINE)
                self.lineno += 1
                self._mark = (0, b"")
                self._bad(on_bad, f"a line over {MAX_LINE} bytes: no gpuval record")
                continue
            if not raw or not (whole or final):
                return  # the end, or a line still being written
            self._mark = (self.offset, raw[:_MARK])
            self.offset += len(raw)
            self.lineno += 1
            if raw.strip() and (wanted is None or wanted(raw)):
                record = self._record(raw, on_bad)
                if record is not None:
                    yield record

    def _record(self, raw: bytes, on_bad: BadLine | None) -> Result | None:
        record, why = parse_line(raw)
        if record is None:
            self._bad(on_bad, why)
            at = raw.rfind(_FIRST_KEY)
            if at > 0:  # a write torn with no newline, the next record glued to it: that record is whole
                record, _ = parse_line(raw[at:])
        return record

    def _bad(self, on_bad: BadLine | None, why: str) -> None:
        self.skipped += 1
        if on_bad is not None:
            on_bad(self.lineno, why)


def iter_results(path: Path, on_bad: BadLine | None = None) -> Iterator[Result]:
    """The records of a JSON Lines file, one line at a time (`JsonlReader`, read whole). A line that is no Result
    (a torn last write, what a full disk leaves) is an error naming it, or, with `on_bad`, reported there and
    skipped."""

    def strict(lineno: int, why: str) -> None:
        raise UsageError(f"{path}:{lineno}: {why}")

    yield from JsonlReader(path, missing_ok=False).read(final=True, on_bad=on_bad or strict)


def read_results(path: Path) -> list[Result]:
    """Every record of a JSON Lines file; a line that is no Result is an error naming the line. (The tests' way
    to read what a command saved; commands stream with `iter_results`.)"""
    return list(iter_results(path))


def run_records(path: Path, run_id: str, offset: int = 0) -> list[Result]:
    """The records of one run in a JSON Lines file, read from `offset` (`end_of` the file when the run began), so
    a long history is not read again; another writer's lines in between are left out by their run id, and a line
    that is no record is skipped."""
    return [r for r in JsonlReader(path, offset).read(final=True) if r.run_id == run_id]


def end_of(path: Path) -> int:
    """Where a JSON Lines file ends now (0 if it does not exist): a run's records are appended after it."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
