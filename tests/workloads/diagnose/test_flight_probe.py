"""A node's probe gets the Flight Recorder dumps of the job's ranks it took, each its own way: on this node, with
processes of job J standing in for ranks (a sleeping Python: what matters here is their environment and state, not
torch), their state files in a hooks folder of this user's own, and gpuval's gloo dump pipe
(gpuval.workloads.train.flight.GlooDumpPipe, the training workload's own) serving recorded dumps of a real hang
(tests/data/flight-recorder/gloo-4rank-stop). A live rank of a real hang dumping through its pipe is proven in
tests/node/test_flight_recorder.py and on real Slurm (test_slurm.py). And a node's answer that would be too long
sheds its dumps after its stacks and RAS, saying so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuval.node.flight_dump import FrDump, parse_dump
from gpuval.node.flight_recorder import RankDump
from gpuval.node.host import hostname
from gpuval.node.pystacks import process_state
from gpuval.node.rank_state import Identity, StateWriter, process_start
from gpuval.workloads.diagnose.probe import NodeProbe, probe_lines, probe_node, read_probes
from gpuval.workloads.train.flight import GlooDumpPipe
from tests.health_support import A100, machine

DATA = Path(__file__).resolve().parents[2] / "data" / "flight-recorder" / "gloo-4rank-stop"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _state(folder: Path, rank: int, pid: int, proc_start: int | None, at: float) -> None:
    StateWriter(folder / f"{pid}.rank", Identity(rank=rank, local_rank=rank, world=6, host=hostname(), pid=pid,
                                                 job="J", started=at, proc_start=proc_start), now=at)


def _served(stem: Path, rank: int, asked: list[int]) -> GlooDumpPipe:
    """Rank `rank`'s dump pipe at the stem, answering with its recorded dump and counting each request."""
    def dump() -> bytes:
        asked.append(rank)
        return (DATA / f"rank_{rank % 4}").read_bytes()
    return GlooDumpPipe(Path(f"{stem}{rank}.pipe"), Path(f"{stem}{rank}"), dump)


def test_each_proven_rank_is_had_its_way_and_no_record_passed_over_is_asked(tmp_path):
    """Rank 0 runs: asked through its pipe. Rank 1 is stopped: its pipe is not written to (it cannot dump), the dump
    it wrote before is read. Rank 2's process is gone: its earlier dump is read. Rank 3 left only a dump at the
    job's stem (no state file). Rank 5's record names a process of job K: passed over, its pipe never written.
    While a rank here makes progress, none is asked."""
    folder = tmp_path / "ranks"
    folder.mkdir(mode=0o700)
    stem, at = folder / "fr-J-", time.time() - 120
    job = {**os.environ, "SLURM_JOB_ID": "J"}
    running, stopped = subprocess.Popen(SLEEP, env=job), subprocess.Popen(SLEEP, env=job)
    other = subprocess.Popen(SLEEP, env={**os.environ, "SLURM_JOB_ID": "K"})
    gone = subprocess.Popen(["true"])
    gone.wait()
    asked: list[int] = []
    pipes = [_served(stem, rank, asked) for rank in (0, 1, 5)]
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        while process_state(stopped.pid) != "T":  # the signal is delivered, not yet acted on, when kill returns
            time.sleep(0.01)
        for rank, proc in ((0, running), (1, stopped), (5, other)):
            _state(folder, rank, proc.pid, process_start(proc.pid), at)
        _state(folder, 2, gone.pid, 12345, at)
        for rank in (1, 2, 3):
            Path(f"{stem}{rank}").write_bytes((DATA / f"rank_{rank}").read_bytes())
        probe = probe_node("J", None, machine(A100), ras=False, stacks=False, folder=folder, stall_s=60)
        busy = probe_node("J", None, machine(A100), ras=False, stacks=False, folder=folder, stall_s=600)
    finally:
        for pipe in pipes:
            pipe.close()
        for proc in (running, stopped, other):
            proc.kill()
            proc.wait()
    assert [(d.rank, d.source, d.named_by) for d in probe.dumps] == [
        (0, "pipe", "gpuval's stem"), (1, "timeout", "gpuval's stem"), (2, "timeout", "gpuval's stem"),
        (3, "timeout", "gpuval's stem")]
    assert asked == [0] and probe.flight_problem == ""
    assert any(f"{other.pid}, which is in job 'K', not J" in note for note in probe.passed_over)
    assert probe.dumps[0].dump == parse_dump((DATA / "rank_0").read_bytes()).compact(16, 4, 24)
    assert busy.dumps == []


def _many_groups(groups: int) -> FrDump:
    """A dump of `groups` process groups, 16 collectives each with rank 0's recorded frames."""
    entry = parse_dump((DATA / "rank_0").read_bytes()).entries[-1]
    entries = [entry.model_copy(update={"record_id": g * 16 + s, "pg_id": g, "process_group": (str(g), f"pg{g}"),
                                        "collective_seq_id": s}) for g in range(groups) for s in range(16)]
    return FrDump(version="2.10", entries=entries)


def test_dumps_too_long_to_send_are_cut_then_left_out_and_said():
    def answer(groups: int) -> NodeProbe:
        dumps = [RankDump(rank=r, source="pipe", dump=_many_groups(groups).compact(16, 4, 24)) for r in range(8)]
        return NodeProbe(host="n1", read_at=1.0, dumps=dumps)

    [(_, cut)] = read_probes(("n1", line) for line in probe_lines(answer(20)))
    entries = cut.dumps[0].dump.entries
    assert len(entries) == 20 * 4 and sum(1 for e in entries if e.frames) == 20  # each group's last 4, 1 with frames
    [(_, bare)] = read_probes(("n1", line) for line in probe_lines(answer(120)))
    assert [d.dump for d in bare.dumps] == [None] * 8
    assert bare.dumps[0].note == "dump left out: this node's answer would be too long to send with it"
