"""Hung and killed ranks of a real local gloo run: a rank killed
with SIGKILL or stopped with SIGSTOP mid-sweep is named (rank, pid, host) within seconds, not the healthy rank 0 and
not after the collective timeout; the rows measured before are kept on stdout, in the -J document and in the Result
record, whichever rank it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpuval.node.pinning import read_process
from gpuval.results import read_results
from gpuval.workloads.ranks import HANG_S
from tests.helpers.processes import rank_pids, running


@pytest.mark.parametrize("sig, victim", [(signal.SIGKILL, 1), (signal.SIGSTOP, 1), (signal.SIGKILL, 0),
                                         (signal.SIGKILL, "starter")])
def test_killed_or_stopped_rank_is_named_and_rows_are_kept(tmp_path, sig, victim):
    """Also: the ranks are forked from one starter (one `import torch`), each named by its rank for ps and for
    `gpuval pin check` (which reads its local rank from that name); a starter killed mid-run leaves no rank
    running unwatched and is named, the rows kept."""
    doc, results = tmp_path / "b.json", tmp_path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "gpuval", "bench", "all_reduce", "-b", "1K", "-e", "1G", "-f", "2",
                             "--nprocs", "2", "-J", str(doc), "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        rows = 0
        for line in proc.stdout:
            rows += bool(line.strip()) and not line.startswith("#")
            if rows == 6:
                break
        starter, ranks = rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1]
        assert [read_process(ranks[r], gpus=8).local_rank for r in (0, 1)] == [0, 1]
        hit = time.monotonic()
        os.kill(starter if victim == "starter" else ranks[victim], sig)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - hit
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2
    # seconds, not -T's 120: a death is seen at once, a stop after HANG_S; the margin is a loaded 2-core machine's
    # (a full run of the suite once took 11.8 s to see a SIGKILL)
    assert took < (HANG_S + 20 if sig == signal.SIGSTOP else 20)
    last = err.strip().splitlines()[-1]
    named = 0 if victim == "starter" else victim
    assert last.startswith(f"error: rank {named} of 2 (pid {ranks[named]} on ")
    assert {signal.SIGSTOP: "stopped responding", signal.SIGKILL: "was killed by SIGKILL"}[sig] in last
    if victim == "starter":
        assert f"lost its starter (pid {starter}), which was killed" in last
        assert not any(running(pid) for pid in ranks.values())  # none left running unwatched
    kept = json.loads(doc.read_text())
    assert len(kept["results"]) >= 6 and f"rank {named} of 2" in kept["errors"][0]
    [record] = read_results(results)
    assert record.status.value == "error" and f"rank {named} of 2" in record.reason
    assert len(record.data.results) >= 6


class _FakeTorch:
    """torch as a machine shows it whose driver sees GPUs but whose CUDA cannot start (HGX without the fabric
    manager: CUDA error 802), or a CPU-only build."""

    __version__ = "2.13.0"

    def __init__(self, cuda_version: str | None) -> None:
        self.version = type("V", (), {"cuda": cuda_version})()

        class Cuda:
            @staticmethod
            def is_available() -> bool:
                return False

            @staticmethod
            def init() -> None:
                raise RuntimeError("CUDA driver initialization failed: system not yet initialized (error 802)")

        self.cuda = Cuda()
        self.device = lambda *a: ("device", a)


@pytest.mark.parametrize("cuda_version, words", [("12.8", "error 802"), (None, "CPU-only build")])
def test_f15_auto_never_falls_back_to_gloo_where_the_driver_sees_gpus(monkeypatch, cuda_version, words):
    from gpuval.errors import MissingDependency
    from gpuval.workloads import ranks

    monkeypatch.setattr(ranks, "_nvml_gpu_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(MissingDependency, match="the driver sees 8 GPU") as err:
        ranks.rank_device(_FakeTorch(cuda_version), "auto", 0)
    assert words in str(err.value)
    monkeypatch.setattr(ranks, "_nvml_gpu_count", lambda: 0)  # no driver: CPU ranks, as before
    assert ranks.rank_device(_FakeTorch(None), "auto", 0)[1] == "gloo"


@pytest.mark.parametrize("version, expected", [((2, 21, 5), 22105), ((2, 27, 3, "rc1"), 22703), (None, None)])
def test_f19_nccl_version_of_any_shape_never_breaks_the_reporting(version, expected):
    from gpuval.workloads.collective.run import _nccl_version

    def fake_version():
        if version is None:
            raise RuntimeError("NCCL not built")
        return version

    torch = type("T", (), {"cuda": type("C", (), {"nccl": type("N", (), {"version": staticmethod(fake_version)})})})
    assert _nccl_version(torch, type("D", (), {"type": "cuda"})()) == expected


FORK_FAILS_ON_RANK_1 = """import os, sys, time, types
from gpuval.workloads import rank_starter
sleepy = types.ModuleType("sleepy")
sleepy.main = lambda argv: time.sleep(60) or 0
sys.modules["sleepy"] = sleepy
real_fork, calls = os.fork, []
def fork():
    calls.append(1)
    if len(calls) > 1:
        raise OSError(11, "Resource temporarily unavailable")
    return real_fork()
os.fork = fork
sys.exit(rank_starter.main(sys.argv[1:]))
"""


def test_a_rank_the_starter_cannot_fork_is_one_line_and_the_started_ones_end(tmp_path):
    """The starter out of processes at rank 1 (os.fork raises EAGAIN): one line, exit 2, no traceback; rank 0,
    already started, is killed and its end written (the launcher then names it), rank 1 never appears."""
    proc = subprocess.run([sys.executable, "-c", FORK_FAILS_ON_RANK_1, str(tmp_path), "sleepy", "request.json", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: could not start rank 1 of 2: Resource temporarily unavailable"
    assert (tmp_path / "rc-0").read_text() == "-9" and not (tmp_path / "pid-1").exists()


_THREADS = """
import sys, torch
from gpuval.node.dist_env import DistEnv
from gpuval.workloads.ranks import share_cores
share_cores(torch, DistEnv(0, 4, 0, int(sys.argv[1]), 0, "127.0.0.1", 29500, "env"))
print(torch.get_num_threads())
"""


@pytest.mark.parametrize("local_ranks, omp, threads", [(2, None, 1), (1, None, "cores"), (2, "2", 2)])
def test_ranks_sharing_a_node_take_one_thread_each_unless_the_user_said(local_ranks, omp, threads):
    """Real torch in a fresh interpreter (its thread count is process-wide): two ranks on a node get one intra-op
    thread each, as torchrun gives its workers; a rank alone on its node keeps a thread per core, and the user's
    OMP_NUM_THREADS is theirs."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": omp} if omp else {})
    out = subprocess.run([sys.executable, "-c", _THREADS, str(local_ranks)], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    assert int(out) == (len(os.sched_getaffinity(0)) if threads == "cores" else threads)
