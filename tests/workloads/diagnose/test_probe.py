"""A node's answer to a job's diagnosis, gathered here: this process as a rank of job J (its state file), the kernel
log through a recorded node (tests/data/kernel-log), RAS from a stand-in listener at the address the rank's own
environment names (NCCL_RAS_ADDR, read from /proc), and the answer printed in lines under 960 bytes that are read
back whole per node, in whatever order the engine interleaves them. Where no rank names an address, RAS is asked on
its default, localhost:28028, where nothing listens here."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

from gpuval.workloads.diagnose.probe import probe_lines, probe_node, read_probes
from gpuval.node.host import hostname
from gpuval.node.rank_state import Identity, StateWriter, process_start
from tests.conftest import DATA
from tests.helpers.ras_standin import RasStandIn, Replay
from tests.health_support import A100, machine, no_imds, unreadable  # noqa: F401


def _rank(folder, pid, job="J"):
    StateWriter(folder / f"{pid}.rank", Identity(rank=0, local_rank=0, world=1, host=hostname(), pid=pid, job=job,
                                                 started=2000.0, proc_start=process_start(pid)), now=2000.0)


def test_ranks_events_and_ras_of_this_node_read_back_from_its_lines(tmp_path):
    node = machine(A100, lambda d: d.update(kernel_log=(DATA / "kernel-log" / "dmesg-T-xid43-31-94.txt")
                                             .read_text().splitlines(), boot_time="2024-07-28T09:15:00+00:00"))
    replay = Replay(text=(DATA / "nccl-ras" / "docs-dead.txt").read_text(),
                    json=(DATA / "nccl-ras" / "source-dead.json").read_text())
    with RasStandIn(replay) as port:
        rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                env={**os.environ, "NCCL_RAS_ADDR": f"127.0.0.1:{port}", "SLURM_JOB_ID": "J"})
        try:
            _rank(tmp_path, rank.pid)
            (tmp_path / "1.rank").symlink_to(tmp_path / f"{rank.pid}.rank")  # passed over, and said
            probe = probe_node("J", datetime.fromtimestamp(1000, timezone.utc), node, stacks=False, folder=tmp_path)
        finally:
            rank.kill()
            rank.wait()
    assert [r.identity.pid for r in probe.ranks] == [rank.pid] and probe.ras_problem == ""
    assert probe.passed_over == ["1.rank passed over: a symbolic link, not a regular file: not followed"]
    assert probe.ras.format == "json" and probe.ras.address == f"127.0.0.1:{port}"
    assert [e.code for e in probe.events.events] == [43, 43, 31, 94]
    lines = probe_lines(probe)
    assert len(lines) > 1 and all(len(line.encode()) < 960 for line in lines)
    other = probe_lines(probe.model_copy(update={"host": "other"}))
    mixed = [("n2", "0: " + line) for line in other]
    mixed = [pair for pairs in zip([("n1", line) for line in lines], mixed) for pair in pairs]
    mixed += [("n1", "an ordinary line"), ("n1", "gpuval-probe {broken")]
    assert [(n, p.host) for n, p in read_probes(mixed)] == [("n1", probe.host), ("n2", "other")]
    assert read_probes(mixed)[0][1] == probe


def test_what_could_not_be_read_is_said(tmp_path):
    _rank(tmp_path, os.getpid(), job="other-job")
    node = machine(A100, unreadable("kernel_messages", "/dev/kmsg: Permission denied"))
    probe = probe_node("J", None, node, stacks=False, folder=tmp_path)
    assert probe.ranks == [] and "Permission denied" in probe.events.problem
    assert probe.ras is None and "no NCCL RAS service at localhost:28028" in probe.ras_problem  # no rank: default
