"""A folder that must be one account's own, and the files in it, where another account may have put something in
the way first: what a job's ranks and the operator's probe of them share on a node (gpuval.node.rank_state).

- `own_folder`: a real folder (a symlink at its name is not followed), owned by that account, writable by no one
  else (neither group nor others); created 0700 where the caller makes it. It is opened once, and the files in it
  are opened by name through that descriptor, so the path is not resolved again.
- `create_in`: a new file, O_EXCL|O_NOFOLLOW: nothing that was at the name is opened; a stale file of the same name
  (an earlier process that had the same pid) is removed first, which only the folder's owner can have put there.
- `open_in`: a file read only when it is regular (a symlink not followed, a FIFO never waited on), of the same owner,
  writable by no one else.

(The node layer's own: gpuval.hooks imports it, and must import neither pydantic nor torch. The other file
operations of this kind, the atomic write and the regular-file read, are gpuval.results.files'.)
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def _not_own(info: os.stat_result, owner: int) -> str:
    """Why a folder or file is not `owner`'s own ('' when it is): another owner, or writable by group or others."""
    if info.st_uid != owner:
        return f"owned by uid {info.st_uid}, not {owner}"
    if info.st_mode & 0o022:
        return f"writable by others than its owner (mode {stat.S_IMODE(info.st_mode):04o})"
    return ""


def own_folder(path: Path, uid: int | None = None, create: bool = False) -> int:
    """`path` opened as `uid`'s own folder (default: this process's effective uid) and its descriptor: a real
    folder (a symlink at its name is not followed), owned by `uid`, writable by no one else. With `create`, made
    0700 first where missing (its missing parents too). Any other folder is an OSError whose strerror says why;
    a missing one without `create` is FileNotFoundError."""
    owner = os.geteuid() if uid is None else uid
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(exc.errno, "a symbolic link or no folder: not followed", str(path)) from None
        raise
    why = _not_own(os.fstat(fd), owner)
    if why:
        os.close(fd)
        raise OSError(errno.EPERM, f"not a folder of uid {owner}'s own: {why}", str(path))
    return fd


def create_in(folder_fd: int, name: str, mode: int = 0o600) -> int:
    """A new file `name` in an own folder (own_folder's descriptor), open for reading and writing: O_EXCL and
    O_NOFOLLOW, so nothing that was at the name is opened; a file left there (a stale one of an earlier process
    that had the same id) is removed first."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, mode, dir_fd=folder_fd)
    except FileExistsError:
        os.unlink(name, dir_fd=folder_fd)
        return os.open(name, flags, mode, dir_fd=folder_fd)


def open_in(folder_fd: int, name: str, uid: int | None = None) -> int:
    """The file `name` of an own folder (own_folder's descriptor) opened for reading, if it is a regular file (a
    symlink is not followed, a FIFO never waited on) owned by `uid` (default: this process's effective uid) and
    writable by no one else; an OSError that says why otherwise."""
    owner = os.geteuid() if uid is None else uid
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not a regular file: not followed", name) from None
        raise
    info = os.fstat(fd)
    why = "not a regular file" if not stat.S_ISREG(info.st_mode) else _not_own(info, owner)
    if why:
        os.close(fd)
        raise OSError(errno.EPERM, why, name)
    return fd
