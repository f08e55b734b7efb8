"""PyTorch's Flight Recorder in gpuval's training job: turned on in every rank before its process group is made, and
its dump pipe served where torch serves none (gloo).

`turn_on` adds the recorder's variables (gpuval.node.flight_recorder.flight_env: the buffer, the dump at a
timeout, the dump file and the pipe, at gpuval's stem in the rank's state folder) to the rank's own environment,
leaving every setting the user made alone. It runs in the rank's process (`gpuval train` under torchrun, srun, an
engine's launcher), so `gpuval train` and `gpuval submit train` both get it, and a probe finds the files by the same
stem without reading the process's environment (/proc/PID/environ shows only what it started with).

torch 2.13 records gloo's collectives too (`gloo:all_reduce` entries with sequence numbers) but only
ProcessGroupNCCL dumps at a timeout or through a pipe. `GlooDumpPipe` is that pipe for a gloo rank, with torch's
names and file: the FIFO `<stem><rank>.pipe`; anything written to it makes the rank write
`_dump_fr_trace()` (the pickle torch's own pipe writes, Python frames included) to `<stem><rank>`, whole (one
atomic write), while the job goes on. A thread waits on the FIFO; it takes the GIL only to dump, which a rank
blocked in a gloo collective has released.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Callable, MutableMapping

from gpuval.node.flight_recorder import BUFFER_ENTRIES, BUFFER_VARS, dump_stem, environment_place, flight_env
from gpuval.node.host import job_of
from gpuval.node.own_folder import own_folder
from gpuval.node.rank_state import hooks_dir
from gpuval.results.files import write_beside


def turn_on(environ: MutableMapping[str, str]) -> Path | None:
    """Turn the Flight Recorder on in `environ` (the rank's os.environ, before its process group is made) where the
    user has not set it; returns gpuval's stem. The state folder is the step timer's, made and checked by the same
    rule (gpuval.node.own_folder: created 0700, a real folder of this user's that no one else may write): where it
    is not this user's own, torch is never pointed at it (its dumps would go wherever another account's links
    there lead); one line says so and None is returned."""
    folder = hooks_dir(dict(environ))
    try:
        os.close(own_folder(folder, create=True))
    except OSError as exc:
        print(f"gpuval train: the Flight Recorder is not turned on: {folder}: {exc.strerror}", file=sys.stderr)
        return None
    stem = dump_stem(folder, job_of(environ))
    environ.update(flight_env(environ, stem))
    return stem


class GlooDumpPipe:
    """A gloo rank's dump pipe: the FIFO `pipe`, served by a thread until `close`; each request writes `target`."""

    def __init__(self, pipe: Path, target: Path, dump: Callable[[], bytes]) -> None:
        self.pipe, self.target = pipe, target
        self._dump = dump
        self._stop = False
        self.pipe.unlink(missing_ok=True)  # a restarted rank's, as torch's DumpPipe does
        os.mkfifo(self.pipe, 0o600)
        # read and write: the read blocks until someone writes (never an end of file), and close() can wake it
        self._fd = os.open(self.pipe, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._inode = os.fstat(self._fd).st_ino
        self._thread = threading.Thread(target=self._serve, name="gpuval-fr-pipe", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                os.read(self._fd, 128)
            except OSError:
                return
            if self._stop:
                return
            try:
                write_beside(self.target.parent, self.target.name, self._dump(), 0o600)
            except (OSError, RuntimeError):  # a full disk, or torch could not dump: the job goes on
                continue

    def close(self) -> None:
        """Stop serving and remove the FIFO (the dumps written stay)."""
        self._stop = True
        try:
            if os.lstat(self.pipe).st_ino == self._inode:  # not a FIFO another run of the same name made since
                self.pipe.unlink()
        except OSError:
            pass
        try:
            os.write(self._fd, b"x")  # wakes the thread, which sees _stop
        except OSError:
            pass
        self._thread.join(timeout=2.0)
        if not self._thread.is_alive():  # one still dumping keeps its descriptor: it must not read a reused one
            os.close(self._fd)


def serve_pipe(torch: Any, backend: str, rank: int, environ: MutableMapping[str, str]) -> GlooDumpPipe | None:
    """The dump pipe of a gloo rank whose environment names one and whose recorder is on, dumping where torch's
    pipe would (gpuval.node.flight_recorder.environment_place); None otherwise (NCCL serves its own; a pipe that
    cannot be made leaves the job as it was)."""
    place = environment_place(rank, environ)
    size = next((environ[n] for n in BUFFER_VARS if n in environ), str(BUFFER_ENTRIES))  # torch's default: on
    if backend != "gloo" or place is None or place.pipe is None or not size.strip().isdigit() or int(size) <= 0:
        return None
    try:
        return GlooDumpPipe(place.pipe, place.file, torch._C._distributed_c10d._dump_fr_trace)
    except OSError:
        return None
