"""PyTorch's Flight Recorder on a node: the environment that turns it on, where each rank's dump is, and getting a
dump out of a live rank through its pipe or picking up the one it wrote at a timeout.

What torch 2.13 reads (its installed headers, torch/csrc/distributed/c10d/FlightRecorder.hpp and
ProcessGroupNCCL.hpp, and the variable names in its libraries):
- the ring buffer's size: TORCH_FR_BUFFER_SIZE, else TORCH_NCCL_TRACE_BUFFER_SIZE (the recorder; default 2000, 0
  turns it off); ProcessGroupNCCL reads TORCH_NCCL_TRACE_BUFFER_SIZE alone, and opens its dump pipe only when that
  is above 0. One setting: both names, or none when the user set either.
- TORCH_NCCL_DUMP_ON_TIMEOUT: each rank dumps when the watchdog sees a collective time out (NCCL only).
- the dump file: TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE, a prefix to which the global rank
  is appended; unset, `$XDG_CACHE_HOME/torch/comm_lib_trace_rank_` (`~/.cache/...`).
- TORCH_NCCL_DEBUG_INFO_PIPE_FILE: ProcessGroupNCCL's DumpPipe (Linux) makes the FIFO `<stem><rank>.pipe` and
  polls it on its monitor thread; anything written to it makes that rank dump to its dump file, and the job goes
  on. torch's own tests give both the same stem (dump `<stem><rank>`, pipe `<stem><rank>.pipe`); so does gpuval.
  gloo has no pipe in torch; gpuval's training workload serves the same pipe for its gloo ranks
  (gpuval.workloads.train.flight).

gpuval's stem is `fr-<job>-` in the rank's own state folder (gpuval.node.rank_state.hooks_dir: a folder of the
job's user's, which the probe already reads). `dump_stem` names it from that folder. Every dump and pipe, wherever
a rank's environment puts it, is reached by the state folder's rules (gpuval.node.own_folder): its folder must be
the rank's user's own (a real folder of that uid that no one else may write) and is opened once; `read_dump` opens
the file through it (a regular file of that user, no symlink followed, not over the size limit) and
`trigger_dump` the pipe (a FIFO of that user, written only when a process reads it).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping

from pydantic import BaseModel

from gpuval.node.flight_dump import MAX_DUMP_BYTES, FrDump, UnreadableDump, parse_dump
from gpuval.node.own_folder import open_in, own_folder

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMP_ON_TIMEOUT_VARS = ("TORCH_NCCL_DUMP_ON_TIMEOUT",)
DUMP_FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
PIPE_VARS = ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE",)
BUFFER_ENTRIES = 2000  # torch's default and its tutorial's advice: a few steps of a multi-group job
TORCH_DEFAULT_NAME = "torch/comm_lib_trace_rank_"
PIPE_SUFFIX = ".pipe"
# What of a rank's environment says where it dumps (environment_place, _torch_default): all a probe keeps of it
PLACE_VARS = DUMP_FILE_VARS + PIPE_VARS + ("XDG_CACHE_HOME", "HOME")
MAX_NAMES = 4096  # names looked at in a stem's folder: a folder flooded with names costs no more


def dump_stem(folder: Path, job: str) -> Path:
    """gpuval's dump and pipe stem for a job's ranks in their state folder: `<folder>/fr-<job>-` (`fr-` without a
    job); a rank's dump is the stem and its rank, its pipe that and `.pipe`. The job id is kept to letters, digits
    and `._-` (it becomes a file name)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", job)[:64]
    return folder / (f"fr-{safe}-" if safe else "fr-")


def flight_env(environ: Mapping[str, str], stem: Path) -> dict[str, str]:
    """The variables that turn the Flight Recorder on, to add to `environ` before the process group is made: the
    buffer, the dump at a timeout, and where it goes (the dump file and the pipe at `stem`). Each setting is left
    alone where the user set any of its names (TORCH_FR_BUFFER_SIZE=0 keeps it off; a dump file or a pipe of the
    user's own keeps both where the user said)."""
    settings = ((BUFFER_VARS, str(BUFFER_ENTRIES)), (DUMP_ON_TIMEOUT_VARS, "1"),
                (DUMP_FILE_VARS + PIPE_VARS, str(stem)))
    return {name: value for names, value in settings if not any(n in environ for n in names) for name in names}


def _named(environ: Mapping[str, str], names: tuple[str, ...]) -> str:
    """The value of the first of `names` set (non-empty) in `environ`, else ''."""
    return next((environ[n] for n in names if environ.get(n)), "")


@dataclass(frozen=True)
class DumpPlace:
    """Where one rank's dump is looked for: its file, its pipe (None: none to ask) and which setting named them."""

    file: Path
    pipe: Path | None
    named_by: str


def _torch_default(environ: Mapping[str, str]) -> str:
    """torch's default dump prefix for a process of this environment, '' where it names no home."""
    cache = environ.get("XDG_CACHE_HOME") or (f"{environ['HOME']}/.cache" if environ.get("HOME") else "")
    return f"{cache}/{TORCH_DEFAULT_NAME}" if cache else ""


def environment_place(rank: int, environ: Mapping[str, str]) -> DumpPlace | None:
    """Where the names in an environment put rank `rank`'s dump and pipe (a pipe without a dump file dumps to
    torch's default file); None where it names neither."""
    named, pipe = _named(environ, DUMP_FILE_VARS), _named(environ, PIPE_VARS)
    prefix = named or _torch_default(environ)
    if not (named or pipe) or not prefix:
        return None
    return DumpPlace(Path(f"{prefix}{rank}"), Path(f"{pipe}{rank}{PIPE_SUFFIX}") if pipe else None,
                     "the rank's environment")


def dump_places(rank: int, environ: Mapping[str, str], stem: Path) -> list[DumpPlace]:
    """Where rank `rank` dumps, most likely first: the names in its environment (/proc/PID/environ: what its
    launcher set; a program that sets them in itself is not seen there), gpuval's stem (gpuval's training workload
    sets them in the rank's process), and torch's default file where the environment names none."""
    named = environment_place(rank, environ)
    places = [named] if named else []
    places.append(DumpPlace(Path(f"{stem}{rank}"), Path(f"{stem}{rank}{PIPE_SUFFIX}"), "gpuval's stem"))
    if not named and _torch_default(environ):
        places.append(DumpPlace(Path(f"{_torch_default(environ)}{rank}"), None, "torch's default"))
    return places


def dumped_ranks(stem: Path, uid: int) -> list[int]:
    """The ranks with a dump file at `stem` (`<stem><rank>`) in a folder of user `uid`'s own (none where the folder
    is not): those of a job whose processes are gone (their state files with them) but whose dumps stayed. At most
    MAX_NAMES names are looked at."""
    try:
        folder = own_folder(stem.parent, uid)
    except OSError:
        return []
    try:
        with os.scandir(folder) as entries:
            names = list(itertools.islice((e.name for e in entries if e.name.startswith(stem.name)), MAX_NAMES))
    finally:
        os.close(folder)
    rests = (name[len(stem.name):] for name in names)
    return sorted(int(rest) for rest in rests if rest.isascii() and rest.isdigit() and len(rest) < 10)


def trigger_dump(pipe: Path, uid: int) -> str:
    """Write to a rank's dump pipe: '' when written, else why not. Only a FIFO of user `uid` in a folder of that
    user's own (own_folder) is written to (a symlink at the name is not followed; the FIFO is checked on the
    descriptor, then opened through it, so nothing swapped in meanwhile is opened), and only while a process reads
    it: a pipe nobody reads is said, never waited on."""
    try:
        folder = own_folder(pipe.parent, uid)
    except FileNotFoundError:
        return f"no pipe at {pipe}"
    except OSError as exc:
        return f"{pipe.parent}: {exc.strerror}: its pipe not written to"
    try:
        handle = os.open(pipe.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except FileNotFoundError:
        return f"no pipe at {pipe}"
    except OSError as exc:
        return f"{pipe}: {exc.strerror}"
    finally:
        os.close(folder)
    try:
        return _write_fifo(handle, pipe, uid)
    finally:
        os.close(handle)


def _write_fifo(handle: int, pipe: Path, uid: int) -> str:
    """Write one byte to the FIFO `handle` (an O_PATH descriptor of `pipe`) if it is one of user `uid`'s that a
    process reads: '' when written, else why not."""
    info = os.fstat(handle)
    if stat.S_ISLNK(info.st_mode):  # O_PATH|O_NOFOLLOW opens a symlink itself
        return f"{pipe} is a symbolic link: not followed"
    if not stat.S_ISFIFO(info.st_mode):
        return f"{pipe} is not a FIFO: not written to"
    if info.st_uid != uid:
        return f"{pipe} belongs to uid {info.st_uid}, not the rank's {uid}: not written to"
    try:
        writer = os.open(f"/proc/self/fd/{handle}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return f"no process reads {pipe} (the rank ended, or its process group is not one that dumps)"
        return f"{pipe}: {exc.strerror}"
    try:
        os.write(writer, b"1")
    finally:
        os.close(writer)
    return ""


def _open_dump(path: Path, uid: int) -> int:
    """`path` opened for reading through its folder, as the state folder's files are (own_folder, open_in): the
    folder user `uid`'s own, the file a regular one of that user (no symlink followed, no FIFO waited on).
    FileNotFoundError where either is missing; UnreadableDump saying why for anything else."""
    try:
        folder = own_folder(path.parent, uid)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableDump(f"{path.parent}: {exc.strerror}: not read") from None
    try:
        return open_in(folder, path.name, uid)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableDump(f"{path}: {exc.strerror}: not read") from None
    finally:
        os.close(folder)


def read_dump(path: Path, uid: int) -> tuple[FrDump, float]:
    """The dump at `path` and when it was written (its mtime): a regular file (no symlink followed, no FIFO read)
    of user `uid` in a folder of that user's own, at most MAX_DUMP_BYTES. FileNotFoundError where there is none;
    UnreadableDump saying why for anything else."""
    with os.fdopen(_open_dump(path, uid), "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_size > MAX_DUMP_BYTES:
            raise UnreadableDump(f"{path}: {info.st_size:,} bytes, over the limit of {MAX_DUMP_BYTES // 2**20} "
                                 "MiB: not read")
        data = handle.read(MAX_DUMP_BYTES + 1)
    return parse_dump(data), info.st_mtime


class RankDump(BaseModel):
    """What was had of one rank's Flight Recorder: `source` `pipe` (dumped on gpuval's request), `timeout`
    (written before: torch's dump at a watchdog timeout or an earlier request), or `none` with `note` saying why."""

    rank: int
    source: Literal["pipe", "timeout", "none"]
    path: str = ""
    named_by: str = ""  # the setting that named the path (DumpPlace.named_by)
    dumped_at: float | None = None
    dump: FrDump | None = None
    note: str = ""


@dataclass(frozen=True)
class DumpRequest:
    """A rank whose dump a probe wants: its rank, its environment (/proc/PID/environ), gpuval's stem for its job
    (dump_stem of its state folder) and its user (whose files alone are read or written to)."""

    rank: int
    environ: Mapping[str, str]
    stem: Path
    uid: int


def _file_state(path: Path) -> tuple[int, int, int] | None:
    """What tells a new dump at `path` from the one there before: inode, mtime and size (None: no file)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def _ask(request: DumpRequest) -> tuple[DumpPlace, tuple[int, int, int] | None] | list[str]:
    """Write to the first of the rank's pipes that takes it: that place and its file's state before; else why
    none did."""
    why = []
    for place in dump_places(request.rank, request.environ, request.stem):
        if place.pipe is None:
            continue
        before = _file_state(place.file)
        said = trigger_dump(place.pipe, request.uid)
        if not said:
            return place, before
        why.append(said)
    return why


Cut = Callable[[FrDump], FrDump]  # what is kept of a dump as soon as it is read (FrDump.compact), else all of it


def _whole(dump: FrDump) -> FrDump:
    return dump


def _await(requests: list[DumpRequest], asked: dict[int, tuple[DumpPlace, tuple[int, int, int] | None]],
           wait_s: float, cut: Cut) -> dict[int, RankDump | str]:
    """The dumps the asked ranks write (their file changed and reads whole: torch writes in place, so a half-written
    one is read again), polled until `wait_s` passed; the reason for each that did not come."""
    deadline = time.time() + wait_s
    got: dict[int, RankDump | str] = {}
    while True:
        for index, (place, before) in asked.items():
            if isinstance(got.get(index), RankDump) or _file_state(place.file) in (before, None):
                continue
            try:
                dump, mtime = read_dump(place.file, requests[index].uid)
            except (FileNotFoundError, UnreadableDump) as exc:
                got[index] = f"could not read the dump: {exc}"
                continue
            got[index] = RankDump(rank=requests[index].rank, source="pipe", path=str(place.file),
                                  named_by=place.named_by, dumped_at=mtime, dump=cut(dump))
        pending = [i for i in asked if not isinstance(got.get(i), RankDump)]
        if not pending or time.time() >= deadline:
            break
        time.sleep(0.1)
    for index in pending:
        got.setdefault(index, f"no dump at {asked[index][0].file} within {wait_s:g} s of asking")
    return got


def _earlier(request: DumpRequest, since: float | None, notes: list[str], cut: Cut) -> RankDump:
    """The dump a rank wrote before (at a timeout, or an earlier request), the first of its places that has one
    written since the job started; else `none` with every reason."""
    for place in dump_places(request.rank, request.environ, request.stem):
        try:
            dump, mtime = read_dump(place.file, request.uid)
        except FileNotFoundError:
            notes.append(f"no dump at {place.file}")
            continue
        except UnreadableDump as exc:
            notes.append(f"could not read the dump: {exc}")
            continue
        if since is not None and mtime < since:
            notes.append(f"{place.file} was written before the job started: another job's")
            continue
        return RankDump(rank=request.rank, source="timeout", path=str(place.file), named_by=place.named_by,
                        dumped_at=mtime, dump=cut(dump), note="; ".join(notes))
    return RankDump(rank=request.rank, source="none", note="; ".join(dict.fromkeys(notes)))


def collect_rank_dumps(requests: list[DumpRequest], since: float | None = None, ask: bool = True,
                       wait_s: float = 10.0, cut: Cut = _whole) -> list[RankDump]:
    """The Flight Recorder dumps of a node's ranks, as a probe gets them: with `ask`, every rank's pipe is written
    to first (dump_places, in order) and the dumps awaited together for `wait_s` (a rank's first dump with frames
    takes seconds: torch symbolizes them); where that fails, or without `ask`, the dump a rank wrote before (at a
    timeout) is read if written since `since` (the job's start, Unix seconds). Each dump is `cut` as soon as it is
    read (a probe holds one whole dump at a time). One RankDump per request, in order: `none` with every reason
    where nothing could be had."""
    asked: dict[int, tuple[DumpPlace, tuple[int, int, int] | None]] = {}
    notes: dict[int, list[str]] = {i: [] for i in range(len(requests))}
    for index, request in enumerate(requests if ask else []):
        outcome = _ask(request)
        if isinstance(outcome, list):
            notes[index].extend(outcome)
        else:
            asked[index] = outcome
    got = _await(requests, asked, wait_s, cut) if asked else {}
    answers = []
    for index, request in enumerate(requests):
        answer = got.get(index)
        if isinstance(answer, RankDump):
            answers.append(answer)
            continue
        if answer:
            notes[index].append(answer)
        answers.append(_earlier(request, since, notes[index], cut))
    return answers
