"""A rank's live state on its node: a small file the step timer keeps current, so that a diagnosis run on the node
(the job's own allocation: `srun --overlap`, `kubectl exec`, or here) finds the job's ranks, how far each got, whether
it waits in a collective, and how to ask it for its Python stacks, even while the job hangs.

One file per process, `<dir>/<pid>.rank` (dir: GPUVAL_HOOKS_DIR, else `gpuval-ranks-<uid>` in the temporary
folder, the same on both sides): 64 bytes of progress the timer rewrites in place through a memory map (a few
hundred nanoseconds an update, no system call), then the process's identity as JSON, written once. The stacks the
process dumps on request (faulthandler, on STACK_SIGNAL) go to `<dir>/<pid>.stacks`.

The folder is its owner's own (gpuval.node.own_folder: created 0700, a real folder of that uid that no one else
may write); a folder someone else made first under that name is refused, never written into, and both files are
created O_EXCL|O_NOFOLLOW, so nothing planted there is followed. What the files say is still only the process's
claim: gpuval.node.rank_probe decides whether the process it names is the job's rank before acting on it.

Progress: `step` (the step begun last), `steps_done`, `launched` and `completed` (collectives: a rank with more
launched than completed waits in one; `launched` is its sequence number), `in_wait` (1 inside an explicit wait),
`step_begun_at` and `progress_at` (Unix seconds of the step's start and of the last change).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import signal
import struct
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from gpuval.node.own_folder import create_in, open_in, own_folder

MAGIC = b"GPVR"
VERSION = 1
SIZE = 4096  # the file: progress, then the identity's JSON
_HEAD = struct.Struct("<4sH2x5q2d")  # magic, version, step, steps_done, launched, completed, in_wait, 2 times
_JSON_AT = 64 + 4  # a 4-byte length, then the JSON
_Q = struct.Struct("<q")
_D = struct.Struct("<d")
STEP, STEPS_DONE, LAUNCHED, COMPLETED, IN_WAIT = (8 + 8 * i for i in range(5))
STEP_BEGUN_AT, PROGRESS_AT = 48, 56
SUFFIX, STACKS_SUFFIX = ".rank", ".stacks"
# A real-time signal no training framework claims (Lightning and Slurm's --signal use SIGUSR1, submitit SIGUSR2):
# the one signal the timer registers and the only one a probe ever sends.
STACK_SIGNAL = signal.SIGRTMIN + 5


def hooks_dir(env: Mapping[str, str] | None = None, uid: int | None = None) -> Path:
    """Where the ranks of user `uid` (default: this process's) keep their state files: GPUVAL_HOOKS_DIR, else a
    folder of that user's in the temporary folder (per user: another user's job on the node neither sees nor
    blocks it)."""
    chosen = (os.environ if env is None else env).get("GPUVAL_HOOKS_DIR")
    owner = os.geteuid() if uid is None else uid
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"gpuval-ranks-{owner}"


def create_own(path: Path) -> int:
    """`path` created new (O_EXCL|O_NOFOLLOW, 0600; a stale file of the same name removed first) in a folder of
    this user's own, made 0700 where missing; an OSError that says why where the folder is not its own."""
    folder = own_folder(path.parent, create=True)
    try:
        return create_in(folder, path.name)
    finally:
        os.close(folder)


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22): with the pid, it tells a
    live rank from a new process that reused a dead rank's pid. None where /proc cannot say."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Identity:
    """Who the process is: written once when the timer starts."""

    rank: int
    local_rank: int
    world: int
    host: str
    pid: int
    job: str = ""
    gpu: int | None = None
    bus: str | None = None
    started: float = 0.0  # Unix seconds
    proc_start: int | None = None  # process_start(pid) when it was written
    signal: int = 0  # the signal that makes it dump its stacks to `stacks` (0: none registered)
    stacks: str = ""


@dataclass(frozen=True)
class Progress:
    """How far the rank got, as last written."""

    step: int
    steps_done: int
    launched: int
    completed: int
    in_wait: bool
    step_begun_at: float
    progress_at: float

    @property
    def in_collective(self) -> bool:
        """It waits in a collective: one launched and not completed, or inside an explicit wait."""
        return self.in_wait or self.launched > self.completed


class StateWriter:
    """The timer's side: creates the file, writes the identity once and the progress fields in place."""

    def __init__(self, path: Path, identity: Identity, now: float) -> None:
        self.path = path
        text = json.dumps(asdict(identity), separators=(",", ":")).encode()[:SIZE - _JSON_AT]
        fd = create_own(path)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        _HEAD.pack_into(self._map, 0, MAGIC, VERSION, -1, 0, 0, 0, 0, 0.0, now)
        struct.pack_into("<I", self._map, 64, len(text))
        self._map[_JSON_AT:_JSON_AT + len(text)] = text

    def count(self, field: int, value: int, now: float) -> None:
        """Set one counter (STEP, STEPS_DONE, LAUNCHED, COMPLETED, IN_WAIT) and the time of the last change."""
        _Q.pack_into(self._map, field, value)
        _D.pack_into(self._map, PROGRESS_AT, now)

    def step_begun(self, step: int, now: float) -> None:
        """A step began."""
        _Q.pack_into(self._map, STEP, step)
        _D.pack_into(self._map, STEP_BEGUN_AT, now)
        _D.pack_into(self._map, PROGRESS_AT, now)

    def close(self) -> None:
        """Unmap and remove the file (the process ends or the timer closes)."""
        self._map.close()
        self.path.unlink(missing_ok=True)


def read_state(path: Path, uid: int | None = None) -> tuple[Identity, Progress] | None:
    """A state file's identity and progress; None for a file that is not one (or is half written), or that is no
    regular file of user `uid`'s (default: this process's) that only they may write (own_folder.open_in: a symlink
    is not followed)."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with os.fdopen(open_in(folder, path.name, uid), "rb") as handle:
                return parse_state(handle.read(SIZE))
        finally:
            os.close(folder)
    except OSError:
        return None


def parse_state(data: bytes) -> tuple[Identity, Progress] | None:
    """The identity and progress in a state file's bytes; None for bytes that are not one."""
    try:
        magic, version, *counts, begun, progress = _HEAD.unpack_from(data, 0)
        if magic != MAGIC or version != VERSION:
            return None
        (length,) = struct.unpack_from("<I", data, 64)
        doc: dict[str, Any] = json.loads(data[_JSON_AT:_JSON_AT + length])
        identity = Identity(**{k: v for k, v in doc.items() if k in Identity.__dataclass_fields__})
    except (ValueError, TypeError, struct.error):
        return None
    if not all(type(getattr(identity, k)) is int for k in ("rank", "local_rank", "world", "pid", "signal")):
        return None
    if not (isinstance(identity.host, str) and isinstance(identity.job, str)
            and type(identity.started) in (int, float) and math.isfinite(identity.started)
            and type(identity.proc_start) in (int, type(None))):
        return None
    step, done, launched, completed, in_wait = counts
    return identity, Progress(step, done, launched, completed, bool(in_wait), begun, progress)
