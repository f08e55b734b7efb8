"""The training job's Flight Recorder set-up (gpuval.workloads.train.flight): turned on in the rank's own
environment at gpuval's stem in its state folder, never over what the user set. The pipe it serves for gloo ranks
is proven live in tests/node/test_flight_recorder.py and in a real torchrun job in test_run.py."""

from __future__ import annotations

import os
import stat

from gpuval.workloads.train.flight import turn_on


def test_turned_on_in_the_ranks_environment_at_the_jobs_stem(tmp_path):
    environ = {"GPUVAL_HOOKS_DIR": str(tmp_path / "ranks"), "SLURM_JOB_ID": "8812"}
    stem = turn_on(environ)
    assert stem == tmp_path / "ranks" / "fr-8812-"
    assert environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] == environ["TORCH_FR_DUMP_TEMP_FILE"] == str(stem)
    assert environ["TORCH_FR_BUFFER_SIZE"] == environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert stat.S_IMODE((tmp_path / "ranks").stat().st_mode) == 0o700


def test_what_the_user_set_stays(tmp_path):
    mine = {"GPUVAL_HOOKS_DIR": str(tmp_path), "TORCH_FR_BUFFER_SIZE": "0", "TORCH_FR_DUMP_TEMP_FILE": "/mine/fr_",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
    environ = dict(mine)
    turn_on(environ)
    assert environ == mine


def test_a_folder_that_is_not_the_users_own_is_never_given_to_torch(tmp_path, capsys):
    """The state folder's rule (gpuval.node.own_folder): a folder anyone may write (made first by someone else, in a
    shared /tmp) would let their links there take torch's dumps anywhere; the recorder is not pointed at it."""
    folder = tmp_path / "ranks"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    environ = {"GPUVAL_HOOKS_DIR": str(folder), "SLURM_JOB_ID": "8812"}
    assert turn_on(environ) is None and environ == {"GPUVAL_HOOKS_DIR": str(folder), "SLURM_JOB_ID": "8812"}
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"gpuval train: the Flight Recorder is not turned on: {folder}: not a folder of uid " \
                   f"{os.geteuid()}'s own: writable by others than its owner (mode 0777)"
