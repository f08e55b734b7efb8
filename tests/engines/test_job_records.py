"""gpuval's job records name the cluster a job was sent to and when (gpuval.engines.records): a record of another
cluster, or of an earlier job of the same id, is not the live job's and is not used (issue 39 item 4). The rule on
its own, and through the local engine (its cluster: this host), whose record is all it knows of a job: a jobs folder
on a home shared between hosts holds other hosts' local jobs. Real Slurm's side (its ClusterName, a job id begun
again) is in tests/workloads/diagnose/test_slurm.py."""

from __future__ import annotations

import grp
import os
import struct
import pwd
import stat
from datetime import datetime, timedelta, timezone

import pytest

from gpuval.engines import get_engine, records
from gpuval.engines.spec import JobSpec
from gpuval.errors import UsageError
from gpuval.node.host import hostname

SENT = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def _record(cluster: str, sent: datetime = SENT, engine: str = "slurm", job: str = "2") -> records.JobRecord:
    return records.JobRecord(engine=engine, job_id=job, spec=JobSpec(name="j", command=["true"]), submitted_at=sent,
                             cluster=cluster, workdir="/nowhere")


def test_a_record_is_the_live_jobs_only_where_nothing_says_otherwise():
    assert records.mismatch(_record("gv1"), "gv1", SENT + timedelta(seconds=3)) == ""
    assert records.mismatch(_record("gv1"), "gv2", SENT) == "it was sent to cluster 'gv1', not this one ('gv2')"
    assert "an earlier job of the same id" in records.mismatch(_record("gv1"), "gv1", SENT + timedelta(days=1))
    assert records.mismatch(_record("gv1"), "gv1", None) == ""  # the engine no longer knows the job: no evidence
    assert records.mismatch(_record(""), "gv1", SENT) == ""  # an older gpuval's record names no cluster
    naive = _record("gv1", SENT.replace(tzinfo=None))  # written as UTC without its zone
    assert records.mismatch(naive, "gv1", SENT) == ""


def test_the_local_engine_uses_no_record_of_another_host(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path))
    records.save(_record("other-host", engine="local", job="job-1"))
    engine = get_engine("local")
    with pytest.raises(UsageError, match="no local job 'job-1'"):
        engine.status("job-1")
    assert engine.notes == ["gpuval's record of local job job-1 is not used: it was sent to cluster 'other-host', "
                            f"not this one ('{hostname()}')"]
    records.save(_record(hostname(), engine="local", job="job-2"))
    assert get_engine("local").record("job-2") == _record(hostname(), engine="local", job="job-2")


def test_r1_a_folder_gpuval_writes_is_one_no_other_user_can_change(monkeypatch, tmp_path):
    """records.private_dir (red team 6 R1): the folders it makes are 0700; every folder on the way that was there
    already is checked too (before the fix it was left as it was): another user's folder, or one others may write,
    is refused in one line, at the folder itself or above it (GPUVAL_JOBS_DIR under a folder `nobody` made); a
    sticky folder above it that all may write (/tmp) is not; a link is resolved, and the folder it leads to checked."""
    made = records.private_dir(tmp_path / "a" / "b")
    assert made == tmp_path / "a" / "b" and all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (made, made.parent))
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(UsageError, match=r"shared: writable by others than its owner \(mode 0777\)"):
        records.private_dir(shared)
    with pytest.raises(UsageError, match=r"shared: writable by others"):
        records.private_dir(shared / "jobs" / "slurm")
    assert not (shared / "jobs").exists()
    shared.chmod(0o1777)  # sticky: others can neither rename nor remove what is in it
    assert records.private_dir(shared / "jobs") == shared / "jobs"
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(theirs / "jobs"))
    with pytest.raises(UsageError, match=r"theirs: owned by uid \d+, neither yours \(uid 0\) nor root's"):
        records.save(_record("gv1"))
    group = tmp_path / "group"  # group-writable (umask 002): refused unless the group is the owner's own
    group.mkdir()
    group.chmod(0o775)
    os.chown(group, -1, grp.getgrnam("staff").gr_gid)
    with pytest.raises(UsageError, match=r"group: writable by others than its owner \(mode 0775\)"):
        records.private_dir(group)
    os.chown(group, -1, 0)  # root's primary group, named root, no other member: a user private group
    assert records.private_dir(group) == group
    os.setxattr(group, "system.posix_acl_access", _acl_letting_write(pwd.getpwnam("nobody").pw_uid))
    with pytest.raises(UsageError, match=r"group: writable by others than its owner"):  # the ACL's user may write
        records.private_dir(group)  # (red team 7 S1: drwxrwxr-x+ passed as root's own group)
    os.removexattr(group, "system.posix_acl_access")
    shared_group = tmp_path / "nobodys"  # nogroup: nobody's primary group, but also _apt's (red team 7 S2)
    shared_group.mkdir()
    shared_group.chmod(0o775)
    os.chown(shared_group, pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid)
    assert records._not_private(os.lstat(shared_group), pwd.getpwnam("nobody").pw_uid, shared_group, False)
    (shared / "jobs").chmod(0o777)
    (tmp_path / "link").symlink_to(shared / "jobs")
    with pytest.raises(UsageError, match=r"shared/jobs: writable by others"):
        records.private_dir(tmp_path / "link")


def _acl_letting_write(uid: int) -> bytes:
    """A POSIX access ACL in the kernel's xattr form (version 2; tag, perm, id per entry) that lets `uid` write:
    what `setfacl -m u:nobody:rwx` sets (no setfacl on the test machine)."""
    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, uid), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
               (0x20, 5, 0xFFFFFFFF)]  # user::rwx user:UID:rwx group::r-x mask::rwx other::r-x
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def test_a_link_another_user_owns_on_the_way_is_refused(tmp_path):
    """Red team 7 S3: `nobody`'s link in a folder all may write, to a folder of root's, would choose where root's
    job script and output go: refused where the path is resolved (private_dir and the Slurm render); root's own
    link is followed."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (sticky / "run").symlink_to(mine)
    os.lchown(sticky / "run", pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(UsageError, match=r"sticky/run: a link owned by uid \d+, neither yours nor root's"):
        records.private_dir(sticky / "run" / "job")
    assert not (mine / "job").exists()
    os.lchown(sticky / "run", 0, -1)
    assert records.private_dir(sticky / "run" / "job") == mine / "job"
