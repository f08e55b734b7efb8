"""The two file operations gpuval does where another account may have put something in the way.

- `write_beside`: a file written whole or not at all. The text goes to a new temporary file in the target's own
  folder (a random name created with O_EXCL and O_NOFOLLOW: nothing there beforehand is opened, a symlink planted
  under a guessed name included), is flushed to the disk, then renamed over the target. A reader sees the old file
  or the new one, never half of one; a symlink at the target's name is replaced, never followed. The kept full
  health result, the deploy manifests, the engines' job records and the local rank starter's pid and exit files
  are written by it.
- `open_regular`: a file opened for reading only when it is a regular file: a symlink at its name is not followed,
  and a FIFO or a device is refused before a byte is read (opened O_NONBLOCK: opening a FIFO never waits for a
  writer, and reading /dev/zero never ends); `skip_line` passes over the rest of a line too long to hold.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO


def write_beside(folder: Path, name: str, text: str | bytes, mode: int = 0o644, *,
                 folder_link: bool = False) -> Path:
    """Write `text` to `folder/name` atomically (a temporary file beside it, fsync, rename) with `mode` whatever
    the umask. The folder itself is opened without following a symlink unless `folder_link` (a folder the user
    named on the command line may be one); a symlink there is an OSError (ELOOP) naming it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if folder_link else os.O_NOFOLLOW)
    try:
        folder_fd = os.open(folder, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(exc.errno, "a symbolic link or no folder: not followed", str(folder)) from None
        raise
    temporary = f".{name}.{secrets.token_hex(6)}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=folder_fd)
        try:
            os.fchmod(fd, mode)  # O_CREAT's mode passes through the umask
            data = text.encode() if isinstance(text, str) else text
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        os.fsync(folder_fd)  # the rename itself survives a crash
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=folder_fd)  # a full disk leaves no half-written temporary file
        except OSError:
            pass
        raise
    finally:
        os.close(folder_fd)
    return folder / name


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file. FileNotFoundError as usual; a symlink at its
    name, a FIFO, a socket or a device is an OSError whose strerror says which (nothing is read from it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not a regular file: not followed", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def skip_line(fh: BinaryIO, chunk: int) -> int:
    """Read past the rest of the current line, `chunk` bytes at a time, without holding it; the bytes passed."""
    skipped = 0
    while part := fh.readline(chunk):
        skipped += len(part)
        if part.endswith(b"\n"):
            break
    return skipped
