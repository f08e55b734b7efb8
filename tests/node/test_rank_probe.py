"""The ranks of a job on this node, from their state files: live ones with their process state, a rank whose process
ended (or whose pid a new process took) as gone, other jobs' and older files passed over, stacks read where asked.
(The probe of a real hung job is in tests/diagnosis/test_hang.py.)

And what the probe may act on: only a record of the job's user's own folder that this node proves to be the job's
rank. The folder and files another account could have put in the way, and records naming a process that is not the
job's rank (another user's, another job's, no start time, another host, a start in the future), are passed over
with a note; a process of another user named by a record is never signalled. Real processes and files here;
`nobody` (setpriv) is the other account."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpuval.node.host import hostname
from gpuval.node.pystacks import process_state
from gpuval.node.rank_probe import Scope, Seen, distrust, elsewhere, probe_ranks, wanted
from gpuval.node.rank_state import STACK_SIGNAL, Identity, StateWriter, process_start

NOBODY = 65534


def _identity(rank: int, pid: int, **changes: object) -> Identity:
    """A record as the timer writes it (of a process that ended: the start time it had, any)."""
    base = Identity(rank=rank, local_rank=rank, world=4, host=hostname(), pid=pid, job="J1", started=2000.0,
                    proc_start=process_start(pid) or 12345)
    return replace(base, **changes)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_live_gone_reused_and_other_jobs_ranks(tmp_path):
    rank = subprocess.Popen(["sleep", "60"], env={**os.environ, "SLURM_JOB_ID": "J1"})  # a rank of job J1
    try:
        _live_gone_reused_and_other_jobs(tmp_path, rank.pid)
    finally:
        rank.kill()
        rank.wait()


def _live_gone_reused_and_other_jobs(tmp_path: Path, me: int) -> None:
    while not Path(f"/proc/{me}/cmdline").read_bytes().startswith(b"sleep") or process_state(me) != "S":
        time.sleep(0.01)  # until the child has exec'd sleep and sleeps
    StateWriter(tmp_path / "a.rank", _identity(1, me), now=2000.0)
    StateWriter(tmp_path / "b.rank", _identity(0, _dead_pid()), now=2000.0)
    StateWriter(tmp_path / "c.rank", _identity(2, me, proc_start=1), now=2000.0)  # the pid is another process now
    StateWriter(tmp_path / "d.rank", _identity(3, me, job="J2"), now=2000.0)
    StateWriter(tmp_path / "e.rank", _identity(3, me, started=10.0), now=10.0)
    StateWriter(tmp_path / "g.rank", _identity(3, me, job=""), now=2000.0)  # names no job: no job's
    (tmp_path / "f.rank").write_text("garbage")
    found = probe_ranks(tmp_path, job="J1", since=1000.0, stacks=False).ranks
    assert [(p.identity.rank, p.state) for p in found] == [(0, "gone"), (1, "S"), (2, "gone")]
    assert [p.running for p in found] == [False, True, False]
    assert found[1].idle_s() >= 0 and found[1].stacks is None
    assert "gone" in found[0].describe_state()
    assert [p.identity.rank for p in probe_ranks(tmp_path, stacks=False).ranks] == [0, 1, 2, 3, 3, 3]


def test_stacks_are_read_for_running_ranks_only(tmp_path):
    StateWriter(tmp_path / "a.rank", _identity(1, os.getpid()), now=2000.0)
    StateWriter(tmp_path / "b.rank", _identity(0, _dead_pid()), now=2000.0)
    gone, me = probe_ranks(tmp_path, timeout_s=20).ranks
    assert gone.stacks is None
    assert me.stacks is not None and (me.stacks.threads or me.stacks.problem)


def test_the_trust_rule():
    """Pure: what a record must show, and what this node must show of its process, before the probe acts."""
    me = _identity(0, 4242, proc_start=77, job="J1", started=2000.0)
    scope = Scope(uid=1000, host=me.host, job="J1", since=1000.0, now=3000.0)
    rank = Seen("S", uid=1000, start=77, job="J1")
    assert distrust(me, rank, scope) == "" and wanted(me, scope)
    assert distrust(me, Seen("S", uid=1000, start=77, job=None), scope) == ""  # environment unreadable: not asked
    assert distrust(me, Seen(None), scope) == "" and distrust(me, replace(rank, start=78), scope) == ""  # gone
    refused = {
        "another user's process": (me, replace(rank, uid=0), "which is uid 0's, not the job's user's (1000)"),
        "another job's process": (me, replace(rank, job="J9"), "which is in job 'J9', not J1"),
        "no start time": (replace(me, proc_start=None), rank, "names no process start time"),
        "a start in the future": (replace(me, started=4102444800.0), rank, "started in the future"),
    }
    for case, (identity, seen, why) in refused.items():
        assert why in distrust(identity, seen, scope), case
    assert not wanted(replace(me, job=""), scope) and not wanted(replace(me, started=999.0), scope)
    assert wanted(replace(me, job="anything"), replace(scope, job=None))
    # another node's rank (a hooks folder on shared storage, fake nodes sharing /tmp): left to that node's probe
    assert elsewhere(replace(me, host="gpu-99"), rank, scope)
    on_n1, probe_on = replace(rank, node="n1"), replace(scope, node="n2")
    assert elsewhere(me, on_n1, probe_on) and not elsewhere(me, on_n1, replace(scope, node="n1"))
    assert not elsewhere(me, on_n1, scope) and not elsewhere(me, rank, probe_on)  # a side that names no node


def _nobody(path: Path) -> None:
    shutil.chown(path, NOBODY, NOBODY)


def test_a_folder_or_file_another_account_could_have_put_in_the_way_is_passed_over(tmp_path):
    """The folder: a symlink to the real one, group-writable, of another owner; a file: a symlink to a real state
    file, a FIFO (never waited on), another owner's. Each is a note; none is a rank."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    StateWriter(real / "1.rank", _identity(0, os.getpid()), now=2000.0)
    (tmp_path / "link").symlink_to(real)
    assert probe_ranks(real, stacks=False).ranks  # the control: the real folder is read
    wide, theirs = tmp_path / "wide", tmp_path / "theirs"
    shutil.copytree(real, wide)
    wide.chmod(0o770)
    shutil.copytree(real, theirs)
    _nobody(theirs)
    for folder, why in [("link", "a symbolic link"), ("wide", "writable by others than its owner (mode 0770)"),
                        ("theirs", f"owned by uid {NOBODY}, not {os.geteuid()}")]:
        scan = probe_ranks(tmp_path / folder, stacks=False)
        assert scan.ranks == [] and why in scan.notes()[0], (folder, scan.notes())
    files = tmp_path / "files"
    files.mkdir(mode=0o700)
    (files / "1.rank").symlink_to(real / "1.rank")
    os.mkfifo(files / "2.rank")
    shutil.copy(real / "1.rank", files / "3.rank")
    _nobody(files / "3.rank")
    shutil.copy(real / "1.rank", files / "4.rank")
    (files / "4.rank").chmod(0o622)
    scan = probe_ranks(files, stacks=False)
    assert scan.ranks == [] and len(scan.notes()) == 4
    assert ["a symbolic link" in scan.notes()[0], "not a regular file" in scan.notes()[1],
            f"owned by uid {NOBODY}" in scan.notes()[2], "writable by others" in scan.notes()[3]] == [True] * 4


@pytest.fixture
def nobodys():
    """A process of user nobody (a plain `sleep`: the default action of the stack signal ends it); setpriv execs
    it, so the pid held is the sleep's."""
    proc = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "sleep", "120"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}").stat().st_uid != NOBODY or process_start(proc.pid) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield proc
    proc.kill()
    proc.wait()


def test_a_record_naming_another_users_process_is_never_acted_on(tmp_path, nobodys):
    """Root's own folder, a well-formed record (host, start time, gpuval's signal) naming nobody's process: root's
    probe passes it over and the process lives. Read as nobody's ranks (`uid`, the job's owner), from nobody's own
    folder, the same record is taken: the probe reads the hooks folder of the job's user, not its own."""
    record = _identity(0, nobodys.pid, signal=int(STACK_SIGNAL), job="")
    mine = tmp_path / "mine"
    StateWriter(mine / f"{nobodys.pid}.rank", record, now=2000.0)
    (mine / f"{nobodys.pid}.stacks").write_text("")
    scan = probe_ranks(mine, stacks=True, timeout_s=1)
    assert scan.ranks == [] and f"which is uid {NOBODY}'s, not the job's user's (0)" in scan.notes()[0]
    time.sleep(0.2)
    assert nobodys.poll() is None
    theirs = tmp_path / "theirs"
    shutil.copytree(mine, theirs)
    for path in (theirs, *theirs.iterdir()):
        _nobody(path)
    [rank] = probe_ranks(theirs, stacks=False, uid=NOBODY).ranks
    assert (rank.identity.pid, rank.state) == (nobodys.pid, "S")
    assert probe_ranks(theirs, stacks=False).notes()[0].endswith(f"owned by uid {NOBODY}, not 0")


def test_a_rank_of_another_job_or_node_by_its_environment_is_passed_over(tmp_path, monkeypatch):
    """The record says job J1; the process it names runs in job J2 (SLURM_JOB_ID in its environment). Then, of J2
    and on node n1 (SLURMD_NODENAME), it is n1's rank: a probe on n2 sharing the folder leaves it to n1's."""
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, "SLURM_JOB_ID": "J2", "SLURMD_NODENAME": "n1"})
    try:
        time.sleep(0.1)
        StateWriter(tmp_path / "1.rank", _identity(0, proc.pid), now=2000.0)
        scan = probe_ranks(tmp_path, job="J1", stacks=False)
        assert scan.ranks == [] and "which is in job 'J2', not J1" in scan.notes()[0]
        assert [r.identity.pid for r in probe_ranks(tmp_path, job="J2", stacks=False).ranks] == []  # record: J1
        StateWriter(tmp_path / "1.rank", _identity(0, proc.pid, job="J2"), now=2000.0)
        monkeypatch.setenv("SLURMD_NODENAME", "n1")
        assert [r.identity.pid for r in probe_ranks(tmp_path, job="J2", stacks=False).ranks] == [proc.pid]
        monkeypatch.setenv("SLURMD_NODENAME", "n2")
        scan = probe_ranks(tmp_path, job="J2", stacks=False)
        assert scan.ranks == [] and scan.notes() == [
            "1 state file(s) of other nodes' ranks left to their nodes (a hooks folder on shared storage)"]
    finally:
        proc.kill()
        proc.wait()
