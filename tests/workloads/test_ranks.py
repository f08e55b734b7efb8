"""Hung and killed ranks of a real local gloo run (shared/reviews/reliability.md section 4, F1/F2): a rank killed
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
from pathlib import Path

import pytest

from gpuval.results import read_results
from gpuval.workloads.ranks import HANG_S


def _rank_pids(parent: int) -> dict[int, int]:
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != parent:
                continue
            env = dict(v.split("=", 1) for v in (entry / "environ").read_text().split("\0") if "=" in v)
        except (OSError, ValueError):
            continue
        if "RANK" in env:
            ranks[int(env["RANK"])] = int(entry.name)
    return ranks


@pytest.mark.parametrize("sig, victim", [(signal.SIGKILL, 1), (signal.SIGSTOP, 1), (signal.SIGKILL, 0)])
def test_killed_or_stopped_rank_is_named_and_rows_are_kept(tmp_path, sig, victim):
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
        ranks = _rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1]
        hit = time.monotonic()
        os.kill(ranks[victim], sig)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - hit
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2
    assert took < (HANG_S + 8 if sig == signal.SIGSTOP else 8)  # seconds, not the -T timeout
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: rank {victim} of 2 (pid {ranks[victim]} on ")
    assert ("stopped responding" if sig == signal.SIGSTOP else "killed by SIGKILL") in last
    kept = json.loads(doc.read_text())
    assert len(kept["results"]) >= 6 and f"rank {victim} of 2" in kept["errors"][0]
    [record] = read_results(results)
    assert record.status.value == "error" and f"rank {victim} of 2" in record.reason
    assert len(record.data.results) >= 6
