"""The site's baseline folder: baseline files every gpuval on a node judges by without being told, as if each had
been given with `--baseline` (a `gpuval baseline learn` file, a site's own SKU file), so that a HealthCheckProgram,
a prolog or an operator's `gpuval health` all judge by the fleet's own bands.

The folder is GPUVAL_BASELINE_DIR, else /etc/gpuval/baselines where it exists; its `*.yaml` files are read in name
order, before the command's own `--baseline` and `--profile` files (which win, band by band). What a folder holds
decides verdicts and drains, so only a trusted one is read: a real folder (no symlink at its name), owned by root or
by the user running gpuval, writable by no one else; each file a regular file writable by no one but its owner.
Anything else is refused in one line (exit 2), never read and never silently passed over.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Mapping

from gpuval.errors import UsageError
from gpuval.node.own_folder import own_folder

SITE_DIR = Path("/etc/gpuval/baselines")
SITE_VARIABLE = "GPUVAL_BASELINE_DIR"
MAX_FILES = 64  # a folder of a site's SKUs and learned files; more is a mistake (a results folder named here)


def site_folder(env: Mapping[str, str] | None = None) -> Path | None:
    """The site's baseline folder: GPUVAL_BASELINE_DIR (an empty value: none), else SITE_DIR where it exists."""
    env = os.environ if env is None else env
    if SITE_VARIABLE in env:
        return Path(env[SITE_VARIABLE]) if env[SITE_VARIABLE] else None
    return SITE_DIR if SITE_DIR.exists() else None


def _trusted_fd(folder: Path) -> int:
    """The folder opened as root's own, else as this user's own; else a UsageError saying why."""
    try:
        return own_folder(folder, 0)
    except OSError as exc:
        if exc.errno != errno.EPERM or os.geteuid() == 0:
            raise UsageError(f"{SITE_VARIABLE} {folder}: {exc.strerror}") from None
    try:
        return own_folder(folder)
    except OSError as exc:
        raise UsageError(f"{SITE_VARIABLE} {folder}: {exc.strerror} (nor root's: not read)") from None


def site_files(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The `*.yaml` files of the site's baseline folder, in name order, absolute (a job on other nodes reads the
    same paths); none where there is no folder. A folder or file another account could have written is refused."""
    folder = site_folder(env)
    if folder is None:
        return ()
    fd = _trusted_fd(folder.absolute())
    try:
        names = sorted(n for n in os.listdir(fd) if n.endswith((".yaml", ".yml")))
        if len(names) > MAX_FILES:
            raise UsageError(f"{SITE_VARIABLE} {folder}: {len(names)} baseline files, at most {MAX_FILES}")
        owner = os.fstat(fd).st_uid
        for name in names:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o022 or info.st_uid != owner:
                raise UsageError(f"{SITE_VARIABLE} {folder / name}: not a regular file of the folder's owner "
                                 "writable by no one else: not read")
    finally:
        os.close(fd)
    return tuple(folder.absolute() / name for name in names)
