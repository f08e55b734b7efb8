"""The rank state file: what the timer writes reads back, progress written in place is seen at once, a file that
is not one (or half written, or a wrong type) is none, and the process start tells a live rank from a reused pid.
The writer's folder is its own: created 0700, refused where another account made it first or may write it, and a
symlink planted at the file's name is removed, never followed (`nobody` is the other account)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from gpuval.node.rank_state import (COMPLETED, LAUNCHED, SIZE, Identity, StateWriter, hooks_dir, process_start,
                                    read_state)

ME = Identity(rank=5, local_rank=1, world=8, host="gpu-07", pid=os.getpid(), job="8812", gpu=1, bus="0000:19:00.0",
              started=1000.0, proc_start=process_start(os.getpid()), signal=39, stacks="/tmp/x.stacks")


def test_identity_and_progress_read_back(tmp_path):
    path = tmp_path / "1.rank"
    writer = StateWriter(path, ME, now=1000.5)
    identity, progress = read_state(path)
    assert identity == ME and (progress.step, progress.launched, progress.progress_at) == (-1, 0, 1000.5)
    writer.step_begun(7, 1001.0)
    writer.count(LAUNCHED, 30, 1001.2)
    _, progress = read_state(path)
    assert (progress.step, progress.launched, progress.completed, progress.in_collective) == (7, 30, 0, True)
    assert (progress.step_begun_at, progress.progress_at) == (1001.0, 1001.2)
    writer.count(COMPLETED, 30, 1001.3)
    assert not read_state(path)[1].in_collective and path.stat().st_size == SIZE
    writer.close()
    assert not path.exists()


def test_what_is_not_a_state_file_is_none(tmp_path):
    StateWriter(tmp_path / "good.rank", ME, now=1.0)
    data = (tmp_path / "good.rank").read_bytes()
    cases = {"empty": b"", "short": data[:30], "magic": b"XXXX" + data[4:], "version": data[:4] + b"\x09" + data[5:],
             "json": data[:68] + b"{not json" + data[77:]}
    wrong_type = json.dumps({**ME.__dict__, "rank": "5"}).encode()
    cases["type"] = data[:64] + len(wrong_type).to_bytes(4, "little") + wrong_type
    for name, content in cases.items():
        (tmp_path / f"{name}.rank").write_bytes(content)
        assert read_state(tmp_path / f"{name}.rank") is None, name
    assert read_state(tmp_path / "absent.rank") is None
    (tmp_path / "link.rank").symlink_to(tmp_path / "good.rank")
    assert read_state(tmp_path / "link.rank") is None and read_state(tmp_path / "good.rank")
    for field, value in [("started", float("nan")), ("host", 7), ("proc_start", "1")]:
        doc = json.dumps({**ME.__dict__, field: value}).encode()
        (tmp_path / "odd.rank").write_bytes(data[:64] + len(doc).to_bytes(4, "little") + doc)
        assert read_state(tmp_path / "odd.rank") is None, field


def test_the_folder_is_made_private_and_a_planted_link_is_never_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root-only important data")
    folder = tmp_path / "ranks"
    old = os.umask(0)
    try:
        StateWriter(folder / "1.rank", ME, now=1.0).close()
    finally:
        os.umask(old)
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    (folder / "2.rank").symlink_to(secret)  # a stale name, as a planted link would be
    writer = StateWriter(folder / "2.rank", ME, now=1.0)
    assert secret.read_text() == "root-only important data" and not (folder / "2.rank").is_symlink()
    assert oct((folder / "2.rank").stat().st_mode & 0o777) == "0o600" and read_state(folder / "2.rank")
    writer.close()


@pytest.mark.parametrize("how", ["another owner", "group-writable", "a symlink"])
def test_a_folder_that_is_not_the_writers_own_is_refused(tmp_path, how):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    folder = real
    if how == "another owner":
        shutil.chown(real, "nobody", "nogroup")
    elif how == "group-writable":
        real.chmod(0o770)
    else:
        folder = tmp_path / "link"
        folder.symlink_to(real)
    with pytest.raises(OSError) as refused:
        StateWriter(folder / "1.rank", ME, now=1.0)
    assert list(real.iterdir()) == [], how
    assert ("owned by uid 65534" if how == "another owner" else "writable by others" if how == "group-writable"
            else "symbolic link") in refused.value.strerror


def test_a_process_start_tells_a_new_process_from_the_old():
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_start(int(done.stdout)) is None  # it ended
    assert isinstance(process_start(os.getpid()), int) and process_start(os.getpid()) == ME.proc_start


def test_the_folder_is_the_users_own_unless_named():
    assert hooks_dir({}).name == f"gpuval-ranks-{os.getuid()}"
    assert str(hooks_dir({"GPUVAL_HOOKS_DIR": "/data/ranks"})) == "/data/ranks"
