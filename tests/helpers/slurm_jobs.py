"""A real Slurm cluster whose fake nodes behave like separate machines for a job's diagnosis, and a slow node.

- Each node's own /tmp: slurmd already runs in a mount namespace of its own with a tmpfs at TmpFS
  (tests/helpers/slurm.py); a TaskProlog points every task's TMPDIR there, as sites do with a node-local scratch
  folder. A rank's state file (gpuval.hooks) then lives on its node only, and a probe step on another node does not
  see it, as on real machines.
- A slow node (`NodeQuota`): a CPU quota on that node's processes, enforced the way a cgroup's CPU bandwidth limit
  (cpu.max) is: in every period the node's processes run for their quota, then are held (SIGSTOP) until the period
  ends (SIGCONT). This sandbox has no cgroups; stopping and continuing every process of the node's tasks gives them
  the same share of wall time, whatever they run (a training step, a fleet check's all_reduce). A node's processes
  are those whose environment says the node is theirs (slurmstepd sets SLURMD_NODENAME in every task), so the
  quota follows every job that lands there, the re-test's too, and no other node's.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.helpers.slurm import SlurmCluster


class NodeTmpCluster(SlurmCluster):
    """SlurmCluster whose tasks' TMPDIR is their node's own tmpfs."""

    def extra_conf(self) -> list[str]:
        prolog = self.root / "task-prolog.sh"
        prolog.write_text(f'#!/bin/sh\necho "export TMPDIR={self.root / "tmpfs"}"\n')
        prolog.chmod(0o755)
        return [f"TaskProlog={prolog}"]


def node_pids(node: str) -> list[int]:
    """Every process of a Slurm task on `node` of this host's fake cluster (its environment names the node and a
    job); slurmstepd itself has neither in its own environment."""
    mark, job = f"SLURMD_NODENAME={node}".encode(), b"SLURM_JOB_ID="
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ and any(item.startswith(job) for item in environ):
            found.append(int(entry.name))
    return found


class NodeQuota:
    """Hold `node`'s task processes to `share` of every `period_s` (a CPU quota), from a thread, until stopped."""

    def __init__(self, node: str, share: float = 0.25, period_s: float = 0.04, rescan_s: float = 0.5) -> None:
        self.node, self.share, self.period_s, self.rescan_s = node, share, period_s, rescan_s
        self._stop, self._paused = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.pids: set[int] = set()
        self.periods = 0

    def _signal(self, sig: int) -> None:
        for pid in list(self.pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                self.pids.discard(pid)

    def _run(self) -> None:
        scanned = 0.0
        while not self._stop.is_set():
            if time.monotonic() - scanned > self.rescan_s:
                self.pids.update(node_pids(self.node))
                scanned = time.monotonic()
            self._signal(signal.SIGCONT)
            time.sleep(self.period_s * self.share)
            if self._paused.is_set():
                continue
            self._signal(signal.SIGSTOP)
            time.sleep(self.period_s * (1 - self.share))
            self.periods += 1
        self._signal(signal.SIGCONT)

    @contextmanager
    def lifted(self) -> Iterator[None]:
        """The node's processes run freely inside the block (no process of the node is left stopped by the quota,
        so a process stopped inside the block is stopped by someone else)."""
        self._paused.set()
        time.sleep(self.period_s * 2)
        try:
            yield
        finally:
            self._paused.clear()

    def __enter__(self) -> "NodeQuota":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.pids.update(node_pids(self.node))
        self._signal(signal.SIGCONT)
