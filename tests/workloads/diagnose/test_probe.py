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


def _job_process(env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process of job J (the probe trusts a record only of the job's own process), once it runs: until it has
    exec'd, /proc/PID/environ is still this process's, which names no job, and the probe rightly passes it over."""
    proc = subprocess.Popen([sys.executable, "-c", "print(flush=True); import time; time.sleep(60)"],
                            env={**os.environ, **(env or {}), "SLURM_JOB_ID": "J"}, stdout=subprocess.PIPE)
    proc.stdout.readline()
    return proc


def _rank(folder, pid, job="J"):
    StateWriter(folder / f"{pid}.rank", Identity(rank=0, local_rank=0, world=1, host=hostname(), pid=pid, job=job,
                                                 started=2000.0, proc_start=process_start(pid)), now=2000.0)


def test_ranks_events_and_ras_of_this_node_read_back_from_its_lines(tmp_path):
    node = machine(A100, lambda d: d.update(kernel_log=(DATA / "kernel-log" / "dmesg-T-xid43-31-94.txt")
                                             .read_text().splitlines(), boot_time="2024-07-28T09:15:00+00:00"))
    replay = Replay(text=(DATA / "nccl-ras" / "docs-dead.txt").read_text(),
                    json=(DATA / "nccl-ras" / "source-dead.json").read_text())
    with RasStandIn(replay) as port:
        rank = _job_process({"NCCL_RAS_ADDR": f"127.0.0.1:{port}"})
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


def _xid_storm(count: int):
    """An H100 node's kernel log through a storm: `count` Xid 13 lines (a real line's shape, the pid varying), with
    one ECC Xid 94 and one SXid among them, the kind of event a storm must not push out."""
    from tests.health_support import H100

    storm = [f"[Mon Aug  5 03:{i // 60 % 60:02d}:{i % 60:02d} 2024] NVRM: Xid (PCI:0000:19:00): 13, pid={1000 + i}, "
             "name=python, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address"
             for i in range(count)]
    storm.insert(count // 2, "[Mon Aug  5 03:30:00 2024] NVRM: Xid (PCI:0000:2a:00): 94, pid=77, name=python, "
                             "Contained: SM (0x1). RST: No, D-RST: No")
    storm.insert(count // 3, "[Mon Aug  5 03:20:00 2024] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, "
                             "Link 30 LTSSM Fault Up")
    return machine(H100, lambda d: d.update(kernel_log=storm, boot_time="2024-08-05T00:00:00+00:00",
                                            now="2024-08-05T06:00:00+00:00"))


def test_d11_an_xid_storm_is_counted_per_code_and_the_answer_still_fits(tmp_path, monkeypatch):
    """reliability-4 D11: 4,000 Xid lines since the job started made the node's answer 952,307 bytes, more than
    the 1,024 pieces a record may take: `probe_lines` raised ValueError, `jobs probe` died, and the node with the
    storm was nominated "unreachable", its events lost. Events are now counted per code and only the last few of
    each are kept, so the answer is bounded whatever the log holds, and the rare ECC Xid survives the storm."""
    monkeypatch.setenv("TZ", "UTC")
    probe = probe_node(None, datetime(2024, 8, 5, tzinfo=timezone.utc), _xid_storm(4000), ras=False, stacks=False,
                       folder=tmp_path)
    events = probe.events
    assert events.total == 4002 and {(c.kind, c.code, c.pci): c.count for c in events.counts} == {
        ("xid", 13, "0000:19:00"): 4000, ("xid", 94, "0000:2a:00"): 1, ("sxid", 20034, "0000:05:00.0"): 1}
    assert len(events.events) <= 3 * len(events.counts) and [e.code for e in events.ecc] == [94]
    assert [e.text.split("pid=")[1][:4] for e in events.events if e.code == 13] == ["4997", "4998", "4999"]
    lines = probe_lines(probe)
    assert len(lines) < 20 and read_probes(("n1", line) for line in lines)[0][1] == probe


def test_stacks_and_ras_too_long_to_send_are_cut_and_said_not_the_answer_lost(tmp_path):
    """The answer is bounded whatever the ranks' stacks and RAS's status hold: 4 ranks of 3 threads of 100 deep
    frames (each in a file of a 2,000-character path) are cut to each rank's main thread, and where even that is
    too long (8 such ranks), the stacks and RAS's status are left out, each saying so; the ranks always arrive."""
    from gpuval.collectives.nccl_ras import RasStatus
    from gpuval.node.pystacks import Frame, Stacks, ThreadStack

    rank = _job_process()
    try:
        _rank(tmp_path, rank.pid)
        probe = probe_node("J", None, machine(A100), ras=False, stacks=False, folder=tmp_path)
    finally:
        rank.kill()
        rank.wait()
    frames = [Frame(function=f"f{i}", file="/deep" * 400 + f"/m{i}.py", line=i) for i in range(100)]
    deep = Stacks(source="py-spy", threads=[ThreadStack(thread=str(t), name="MainThread" if t == 0 else f"t{t}",
                                                        frames=frames) for t in range(3)])
    ranks = [probe.ranks[0].model_copy(update={"stacks": deep})] * 4
    probe = probe.model_copy(update={"ranks": ranks, "ras": RasStatus(format="text", text="x" * (256 << 10))})
    [(_, cut)] = read_probes(("n1", line) for line in probe_lines(probe))
    assert [len(r.stacks.threads) for r in cut.ranks] == [1] * 4 and len(cut.ranks[0].stacks.threads[0].frames) == 64
    assert "2 other thread(s) left out" in cut.ranks[0].stacks.problem and cut.ras.text == ""
    [(_, bare)] = read_probes(("n1", line) for line in probe_lines(probe.model_copy(update={"ranks": ranks * 2})))
    assert len(bare.ranks) == 8 and all(r.stacks.threads == [] and "left out" in r.stacks.problem for r in bare.ranks)
    assert bare.ras is None and "left out" in bare.ras_problem
