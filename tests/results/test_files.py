"""results.files.write_beside, the one atomic write (the kept full health result, the deploy manifests, the job
records and scripts, the node_exporter textfile, a sweep's rows so far), and what its users no longer do: write
through a symlink planted at a fixed temporary name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuval.engines import records
from gpuval.engines.spec import JobSpec
from gpuval.results.files import open_regular, write_beside


def test_the_file_is_replaced_whole_with_its_mode_whatever_the_umask(tmp_path: Path):
    (tmp_path / "f.json").write_text("old")
    old = os.umask(0o077)
    try:
        write_beside(tmp_path, "f.json", "new", 0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "f.json").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temporary file left


def test_a_symlink_at_the_name_is_replaced_never_followed(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "f.json").symlink_to(victim)
    write_beside(tmp_path, "f.json", "new")
    assert victim.read_text() == "keep" and not (tmp_path / "f.json").is_symlink()


def test_a_symlinked_folder_is_refused_unless_the_user_named_it(tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError, match="symbolic link"):
        write_beside(tmp_path / "link", "f", "x")
    write_beside(tmp_path / "link", "f", "x", folder_link=True)
    assert (real / "f").read_text() == "x"


def test_a_failed_rename_leaves_no_temporary_file(tmp_path: Path):
    (tmp_path / "f").mkdir()  # a folder at the name: the rename fails
    with pytest.raises(OSError):
        write_beside(tmp_path, "f", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_job_record_is_never_written_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The job record was written to the fixed name JOB.tmp, opened with O_TRUNC and following a symlink: a link
    planted there truncated and overwrote its target."""
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path / "jobs"))
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "jobs" / "local").mkdir(parents=True)
    (tmp_path / "jobs" / "local" / "42.tmp").symlink_to(victim)
    records.save(records.JobRecord(engine="local", job_id="42", spec=JobSpec(name="j", command=["true"])))
    assert victim.read_text() == "keep"
    assert records.load("local", "42") is not None
    mode = (tmp_path / "jobs" / "local" / "42.json").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_open_regular_refuses_what_is_no_regular_file(tmp_path: Path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    for path, why in ((tmp_path / "fifo", "not a regular file"), (tmp_path / "zero", "symbolic link"),
                      (Path("/dev/zero"), "not a regular file"), (tmp_path, "directory")):
        with pytest.raises(OSError, match=why):
            open_regular(path)
