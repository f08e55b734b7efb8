"""The step timer: in this process (host clock, explicit waits, its state file and stack signal), and in real gloo
jobs used the documented ways (DDP, a plain loop, accelerate, FSDP2), where the rank that computes longer shows it
and waits less."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuval.diagnosis.job_records import read_job_records
from gpuval.hooks import StepTimer, read_line
from gpuval.hooks.timer import STACK_SIGNAL
from gpuval.node.pystacks import read_faulthandler
from gpuval.node.rank_state import read_state
from tests.helpers import forked_ranks
from tests.helpers.timer_jobs import SCRIPT, job_env


def _records(text: str) -> list:
    return [r for r in (read_line(line) for line in text.splitlines()) if r is not None]


def test_waits_and_compute_are_split_and_reported_every_n_steps(tmp_path):
    out = io.StringIO()
    timer = StepTimer(every=3, stream=out, state_dir=tmp_path)
    for _ in range(7):
        with timer.step():
            time.sleep(0.01)
            with timer.wait():
                time.sleep(0.02)
    timer.close()
    records = _records(out.getvalue())
    assert [(r.first, r.last, r.n) for r in records] == [(0, 2, 3), (3, 5, 3), (6, 6, 1)]
    for r in records:
        assert r.wait_s.med >= 0.02 and r.compute_s.med >= 0.01
        assert r.step_s.sum == pytest.approx(r.compute_s.sum + r.wait_s.sum, rel=1e-4)
        assert (r.rank, r.world, r.pid, r.gpu) == (0, 1, os.getpid(), None)
    assert [(r.coll, r.seq) for r in records] == [(3, 3), (3, 6), (1, 7)]


def test_the_state_file_follows_the_rank_and_goes_at_close(tmp_path):
    timer = StepTimer(every=100, stream=io.StringIO(), state_dir=tmp_path)
    path = tmp_path / f"{os.getpid()}.rank"
    with timer.step():
        pass
    with timer.step():
        with timer.wait():
            identity, progress = read_state(path)
            assert progress.in_wait and progress.in_collective and progress.launched == 1
            assert progress.step == 1 and progress.steps_done == 1
    identity, progress = read_state(path)
    assert (identity.rank, identity.pid, identity.signal) == (0, os.getpid(), int(STACK_SIGNAL))
    assert not progress.in_collective and progress.completed == 1 and progress.steps_done == 2
    assert progress.progress_at >= progress.step_begun_at > 0
    timer.close()
    assert not path.exists() and not Path(identity.stacks).exists()


def test_the_stack_signal_dumps_every_thread_to_the_file_the_state_names(tmp_path):
    timer = StepTimer(stream=io.StringIO(), state_dir=tmp_path)
    with timer.step():
        identity, _ = read_state(tmp_path / f"{os.getpid()}.rank")
        os.kill(os.getpid(), identity.signal)
    threads = read_faulthandler(Path(identity.stacks).read_text())
    current = next(t for t in threads if t.current)
    assert any(f.function == "test_the_stack_signal_dumps_every_thread_to_the_file_the_state_names"
               for f in current.frames)
    timer.close()


def test_a_signal_the_program_handles_is_left_alone(tmp_path):
    previous = signal.signal(STACK_SIGNAL, lambda *_: None)
    try:
        timer = StepTimer(stream=io.StringIO(), state_dir=tmp_path)
        with timer.step():
            identity, _ = read_state(tmp_path / f"{os.getpid()}.rank")
        assert identity.signal == 0 and identity.stacks == ""
        timer.close()
    finally:
        signal.signal(STACK_SIGNAL, previous)


def test_records_still_go_out_where_no_state_file_can_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    out = io.StringIO()
    timer = StepTimer(every=1, stream=out, state_dir=blocker / "sub", stacks=False)
    with timer.step():
        pass
    timer.close()
    assert len(_records(out.getvalue())) == 1


def test_a_hooks_folder_another_user_made_first_is_never_written(tmp_path):
    """The folder under the timer's name made first by nobody, writable by all, holding links at this process's
    file names to files of this user's: the timer writes nothing there (the files keep their bytes), says so once on
    the records' stream, and its records still go out."""
    folder = tmp_path / "gpuval-ranks-0"
    folder.mkdir()
    secret = {name: tmp_path / name for name in ("a", "b")}
    for name, path in secret.items():
        path.write_text(f"root-only {name}")
    (folder / f"{os.getpid()}.rank").symlink_to(secret["a"])
    (folder / f"{os.getpid()}.stacks").symlink_to(secret["b"])
    shutil.chown(folder, "nobody", "nogroup")
    folder.chmod(0o777)
    out = io.StringIO()
    timer = StepTimer(every=1, stream=out, state_dir=folder)
    with timer.step():
        pass
    timer.close()
    assert [path.read_text() for path in secret.values()] == ["root-only a", "root-only b"]
    [warning] = [line for line in out.getvalue().splitlines() if line.startswith("gpuval.hooks:")]
    assert f"no rank state file in {folder} (not a folder of uid 0's own: owned by uid 65534" in warning
    assert len(_records(out.getvalue())) == 1


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="every"):
        StepTimer(every=0)
    import torch

    with pytest.raises(TypeError, match="a communication hook is DDP's: Linear takes none"):
        StepTimer().attach(torch.nn.Linear(2, 2), hook=lambda state, bucket: None)


def test_the_process_groups_collectives_are_timed_once_and_put_back_at_close(tmp_path):
    """A one-rank gloo group in this process: torch.distributed's functions wrapped while the timer runs. A
    synchronous all_reduce is waiting, an asynchronous one completes with its future, one inside timer.wait() is
    that wait's (counted once), one from another thread is not the timer's; at close the functions are torch's."""
    import threading

    import torch
    import torch.distributed as dist

    original = dist.all_reduce
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    out = io.StringIO()
    timer = StepTimer(every=3, stream=out, state_dir=tmp_path / "state", stacks=False)
    try:
        timer.time_collectives()
        assert dist.all_reduce is not original and dist.distributed_c10d.all_reduce is dist.all_reduce
        tensor = torch.ones(1024)
        with timer.step():
            dist.all_reduce(tensor)
        with timer.step():
            dist.all_reduce(tensor, async_op=True).wait()
            thread = threading.Thread(target=dist.barrier)
            thread.start()
            thread.join()
        with timer.step():
            with timer.wait():
                dist.all_reduce(tensor)
        timer.close()
        assert dist.all_reduce is original and dist.distributed_c10d.all_reduce is original
        [record] = _records(out.getvalue())
        assert (record.coll, record.seq) == (3, 3) and record.wait_s.sum > 0
        assert record.xfer is None  # one rank moves nothing over a bus
    finally:
        timer.close()  # a failed test leaves torch's functions as they were
        dist.destroy_process_group()


def test_importing_the_hooks_imports_neither_torch_nor_pydantic_nor_pynvml():
    code = ("import sys, gpuval.hooks; "
            "print(sorted(m for m in ('torch', 'pydantic', 'pynvml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


GRADIENT_BYTES = (64 * 64 + 64 + 64 * 4 + 4) * 4  # timer_job.py's model, float32


@pytest.mark.parametrize("mode", ["ddp", "plain", "accelerate", "fsdp"])
def test_a_real_job_shows_the_slow_rank_computing_longer_and_waiting_less(mode, tmp_path):
    """2 gloo ranks; rank 1 sleeps 40 ms a step in its compute. DDP, the timer attached; a plain loop timing its own
    all-reduce; Accelerator(cpu=True), the prepared model attached; FSDP2's fully_shard, its process group's
    collectives timed. The ranks are forked from one import of torch with torchrun's environment
    (tests/helpers/forked_ranks.py): what the timer measures does not depend on what started the ranks; DDP's timer
    under torchrun itself, and `accelerate launch`, are gpuval train's (tests/workloads/train/test_run.py). Each
    window carries its collectives' bus bytes: an all-reduce of the gradients over 2 ranks puts their size on the
    bus (2(n-1)/n = 1) each step; FSDP's all-gathers and reduce-scatters (n-1)/n of each (padded) buffer, one per
    layer and pass."""
    done = subprocess.run(forked_ranks.command(2, SCRIPT, mode, "16", "4", "40"), capture_output=True, text=True,
                          env=job_env(tmp_path / "state"), timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    found = read_job_records(("local", line) for line in done.stderr.splitlines())
    assert sorted({(r.rank, r.first, r.last) for r in found.records}) == [
        (rank, first, first + 3) for rank in (0, 1) for first in (0, 4, 8, 12)]
    by_rank = {rank: [r for r in found.records if r.rank == rank and r.first > 0] for rank in (0, 1)}
    for fast, slow in zip(by_rank[0], by_rank[1]):
        assert slow.compute_s.med - fast.compute_s.med > 0.025, (fast, slow)
        assert fast.wait_s.med - slow.wait_s.med > 0.025, (fast, slow)
        assert slow.seq == fast.seq > 0
    for r in found.records:
        assert r.xfer is not None and r.xfer.seconds > 0 and r.cpu is not None and r.cpu.cpu_s > 0
        if mode == "fsdp":  # each layer's all-gather in forward, again in backward (resharded), its reduce-scatter
            assert r.xfer.bus_bytes == GRADIENT_BYTES * 4 * 3 // 2, r.xfer
        else:
            assert r.xfer.bus_bytes == GRADIENT_BYTES * 4
    assert not list((tmp_path / "state").glob("*.rank"))  # each rank closed its timer
