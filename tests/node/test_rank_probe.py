"""The ranks of a job on this node, from their state files: live ones with their process state, a rank whose process
ended (or whose pid a new process took) as gone, other jobs' and older files passed over, stacks read where asked.
(The probe of a real hung job is in tests/diagnosis/test_hang.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from gpuval.node.rank_probe import probe_ranks
from gpuval.node.rank_state import Identity, StateWriter, process_start


def _identity(rank: int, pid: int, **changes: object) -> Identity:
    base = Identity(rank=rank, local_rank=rank, world=4, host="h", pid=pid, job="J1", started=2000.0,
                    proc_start=process_start(pid))
    return replace(base, **changes)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_live_gone_reused_and_other_jobs_ranks(tmp_path):
    me = os.getpid()
    StateWriter(tmp_path / "a.rank", _identity(1, me), now=2000.0)
    StateWriter(tmp_path / "b.rank", _identity(0, _dead_pid()), now=2000.0)
    StateWriter(tmp_path / "c.rank", _identity(2, me, proc_start=1), now=2000.0)  # the pid is another process now
    StateWriter(tmp_path / "d.rank", _identity(3, me, job="J2"), now=2000.0)
    StateWriter(tmp_path / "e.rank", _identity(3, me, started=10.0), now=10.0)
    (tmp_path / "f.rank").write_text("garbage")
    found = probe_ranks(tmp_path, job="J1", since=1000.0, stacks=False)
    assert [(p.identity.rank, p.state) for p in found] == [(0, "gone"), (1, "R"), (2, "gone")]
    assert [p.running for p in found] == [False, True, False]
    assert found[1].idle_s() >= 0 and found[1].stacks is None
    assert "gone" in found[0].describe_state()
    assert [p.identity.rank for p in probe_ranks(tmp_path, stacks=False)] == [0, 1, 2, 3, 3]


def test_stacks_are_read_for_running_ranks_only(tmp_path):
    StateWriter(tmp_path / "a.rank", _identity(1, os.getpid()), now=2000.0)
    StateWriter(tmp_path / "b.rank", _identity(0, _dead_pid()), now=2000.0)
    gone, me = probe_ranks(tmp_path, timeout_s=20)
    assert gone.stacks is None
    assert me.stacks is not None and (me.stacks.threads or me.stacks.problem)
