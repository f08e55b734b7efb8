"""What gpuval remembers about the jobs it submitted: the spec, where the output goes, whether we cancelled it.

Engines forget finished jobs (squeue after MinJobAge, a deleted Kubernetes object); the record lets
`gpuval jobs logs` find a Slurm output file and `--wait --json` know which reader parses the output.
One JSON file per job under GPUVAL_JOBS_DIR, else the `jobs` folder of gpuval's data directory.

A job id is the engine's, and the engine's alone does not say which job: another cluster has its own job 2, and a
Slurm cluster whose state was reset numbers its jobs from 1 again. So a record names the cluster it was sent to
(`cluster`: Slurm's ClusterName, the Kubernetes API server, this host for local) and when (`submitted_at`), and
`mismatch` says why a record is not the live job's: another cluster's, or sent more than SUBMIT_SLACK_S away from
the live job's submit time. Engines read records only through `Engine.record`, which applies it.

Records and job scripts hold the job's environment (`--env` values: tokens, passwords), so gpuval writes them
readable by their owner only (files 0600, the folders it creates 0700), on a login node shared with others, and
only in folders no other user can change (`private_dir`, which also checks a Slurm job's workdir).
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
from datetime import datetime, timezone
from pathlib import Path

import platformdirs
from pydantic import BaseModel, Field

from gpuval.engines.spec import JobSpec
from gpuval.errors import UsageError
from gpuval.results.files import write_beside


class JobRecord(BaseModel):
    """One submitted job."""

    engine: str
    job_id: str
    spec: JobSpec
    run_id: str = ""
    submitted_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    output: str | None = Field(None, description="Output file of engines that write one (local, Slurm).")
    workdir: str | None = None
    cancelled: bool = False
    cluster: str = Field("", description="The cluster it was sent to (Engine.cluster_name); '' in a record of an "
                                         "older gpuval, or of an engine that names none.")


# How far a record's time of sending may lie from the engine's submit time of the live job of that id: the record
# is written once the engine answered (seconds later), on a machine whose clock may differ from the scheduler's.
SUBMIT_SLACK_S = 600.0


def mismatch(record: JobRecord, cluster: str, submitted: datetime | None) -> str:
    """Why `record` is not the job that now has its id ('' when nothing says it is not): it names another cluster
    than `cluster` (the engine's now; either '' is no evidence), or it was sent more than SUBMIT_SLACK_S away from
    `submitted`, the live job's submit time as the engine says (None: the engine knows no such job now)."""
    if record.cluster and cluster and record.cluster != cluster:
        return f"it was sent to cluster {record.cluster!r}, not this one ({cluster!r})"
    sent = record.submitted_at if record.submitted_at.tzinfo else record.submitted_at.replace(tzinfo=timezone.utc)
    if submitted is not None and abs((sent - submitted).total_seconds()) > SUBMIT_SLACK_S:
        return (f"it was sent at {sent.isoformat(timespec='seconds')}, and the job that has its id now was submitted "
                f"at {submitted.isoformat(timespec='seconds')}: an earlier job of the same id")
    return ""


def jobs_dir() -> Path:
    """Where job records live."""
    env = os.environ.get("GPUVAL_JOBS_DIR")
    return Path(env) if env else platformdirs.user_data_path("gpuval") / "jobs"


def _path(engine: str, job_id: str) -> Path:
    return jobs_dir() / engine / (re.sub(r"[^A-Za-z0-9_.-]", "_", job_id) + ".json")


def private_dir(path: Path) -> Path:
    """`path` as a folder only its owner (this user or root) can change, its links resolved: each folder from / down
    is made where missing (0700, whatever the umask) and then checked by lstat, the ones that were there already
    too. A folder another user owns, or one others (group or all) may write, is a UsageError: that user could swap
    a file gpuval writes there (a job's script, its record), or plant a link where Slurm writes the job's output as
    this user. A folder above it may be writable by all where it is sticky and root's or this user's (/tmp): others
    can then neither rename nor remove what is in it."""
    real = resolved(path)
    me = os.geteuid()
    for folder in (*reversed(real.parents), real):
        if not os.path.lexists(folder):
            try:
                folder.mkdir(mode=0o700)
                folder.chmod(0o700)  # mkdir's mode passes through the umask
            except FileExistsError:
                pass  # made meanwhile: checked as any folder that was there
        why = _not_private(os.lstat(folder), me, folder, above=folder != real)
        if why:
            raise UsageError(f"{folder}: {why}: another user could change what gpuval writes there (give a folder "
                             f"only you{' or root' if me else ''} can write)")
    return real


def resolved(path: Path | str) -> Path:
    """`path` with its links resolved, each link on the way as named first checked to be this user's or root's
    (another user's link, in a folder all may write such as /tmp, would choose which of this user's folders gpuval
    writes into: refused, as the kernel's protected_symlinks would)."""
    me, current = os.geteuid(), Path("/")
    for part in Path(os.path.abspath(path)).parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except OSError:
            break  # not there yet: made below by private_dir, as a folder
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (me, 0):
                raise UsageError(f"{current}: a link owned by uid {info.st_uid}, neither yours nor root's: another "
                                 "user chooses where it leads (name the folder itself)")
            current = Path(os.path.realpath(current))
    return Path(os.path.realpath(path))


def _not_private(info: os.stat_result, me: int, folder: Path, above: bool) -> str:
    """Why a folder is not one only `me` or root can change ('' when it is); `above`: one of its parents, where
    the sticky bit keeps others from what is in it."""
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder (a symbolic link, or changed meanwhile)"
    if info.st_uid not in (me, 0):
        return f"owned by uid {info.st_uid}, neither yours (uid {me}) nor root's"
    writable = info.st_mode & 0o002 or (info.st_mode & 0o020 and not _own_group(info, folder))
    if writable and not (above and info.st_mode & stat.S_ISVTX):
        return f"writable by others than its owner (mode {stat.S_IMODE(info.st_mode):04o})"
    return ""


def _own_group(info: os.stat_result, folder: Path) -> bool:
    """The folder's group is its owner's own, a user private group (which RHEL's umask 002 assumes: there every
    folder a user makes is group-writable): the owner's primary group, named as the owner, no other member listed,
    and no POSIX ACL on the folder (with one, the group bits are the ACL's mask: a user it names may write)."""
    try:
        owner = pwd.getpwuid(info.st_uid)
        group = grp.getgrgid(info.st_gid)
        acl = "system.posix_acl_access" in os.listxattr(folder, follow_symlinks=False)
    except (KeyError, OSError):  # an owner or a group the system does not know, or no answer: none vouches for it
        return False
    return (not acl and owner.pw_gid == info.st_gid and group.gr_name == owner.pw_name
            and set(group.gr_mem) <= {owner.pw_name})


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (results.files.write_beside: a temporary file beside it, renamed
    over it) in a folder only its owner can change (`private_dir`), the file readable by its owner only (0600)."""
    folder = private_dir(path.parent)
    return write_beside(folder, path.name, text, 0o600)


def save(record: JobRecord) -> None:
    """Write (or replace) a job's record, atomically, readable by its owner only."""
    write_private(_path(record.engine, record.job_id), record.model_dump_json(indent=2))


def load(engine: str, job_id: str) -> JobRecord | None:
    """The record stored under this engine and job id, or None; whether it is the live job's is
    `Engine.record`'s to say (`mismatch`)."""
    path = _path(engine, job_id)
    if not path.exists():
        return None
    return JobRecord.model_validate_json(path.read_text())


def mark_cancelled(record: JobRecord) -> None:
    """Remember that the user cancelled the job (engines that delete the job cannot say so afterwards)."""
    save(record.model_copy(update={"cancelled": True}))
