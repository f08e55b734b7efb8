"""The hang analysis: on probes built to a plan (progressing, a stopped rank, a gone rank, a rank no node has,
every rank in the same collective, the collective of a stack), RAS's words and flags as suspects on the recorded
statuses (tests/data/nccl-ras), and on a real gloo job whose last rank stopped itself (SIGSTOP): the probe of this
node names it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from gpuval.collectives.nccl_ras import read_json_status, read_text_status
from gpuval.diagnosis.hang import collective_of, find_hang, ras_suspects
from gpuval.node.pystacks import Frame, Stacks, ThreadStack, read_pyspy
from gpuval.node.rank_probe import RankProbe, probe_ranks
from gpuval.node.rank_state import Identity, Progress, read_state
from tests.helpers.timer_jobs import job_command, job_env

DATA = Path(__file__).resolve().parent.parent / "data"
NOW = 10_000.0


def _probe(rank: int, launched: int, completed: int, state: str = "S", idle: float = 120.0, world: int = 4,
           stacks: Stacks | None = None, pid: int | None = None) -> RankProbe:
    identity = Identity(rank=rank, local_rank=rank % 2, world=world, host=f"h{rank // 2}", pid=pid or 100 + rank,
                        gpu=rank % 2, bus=f"0000:{rank:02x}:00.0", started=1.0)
    progress = Progress(step=41, steps_done=41, launched=launched, completed=completed, in_wait=False,
                        step_begun_at=NOW - idle - 1, progress_at=NOW - idle)
    return RankProbe(identity=identity, progress=progress, state=state, stacks=stacks, read_at=NOW)


def _on_nodes(*probes: RankProbe) -> list[tuple[str, RankProbe]]:
    return [(f"node-{p.identity.rank // 2}", p) for p in probes]


def test_a_job_that_still_moves_is_no_hang():
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 9, 8), _probe(2, 9, 8, idle=2.0), _probe(3, 9, 8)))
    assert report.outcome == "progressing" and "rank(s) 2 made progress" in report.reason and not report.waited_for


def test_a_stopped_rank_is_the_one_the_others_wait_for():
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 9, 8), _probe(2, 8, 8, state="T"), _probe(3, 9, 8)))
    assert report.outcome == "hang"
    (rank,) = report.waited_for
    assert (rank.rank, rank.node, rank.gpu, rank.bus, rank.state) == (2, "node-1", 0, "0000:02:00.0", "stopped")
    assert "its process is stopped" in rank.why and "no rank made progress for 120 s" in report.reason


def test_a_rank_behind_in_compute_and_a_gone_one_are_named():
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 8, 8), _probe(2, 9, 8), _probe(3, 9, 8, state="gone")))
    assert [(r.rank, r.why.split(",")[0]) for r in report.waited_for] == [
        (3, "its process is gone"), (1, "it launched 8 collective(s)")]
    assert "rank(s) 1, 3 hold up the ranks waiting in collective #9" in report.reason


def test_a_rank_no_node_has_is_named_with_the_node_its_records_give():
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 9, 8), _probe(2, 9, 8)), world=4, node_of={3: "node-1"})
    assert [(r.rank, r.node) for r in report.waited_for] == [(3, "node-1")]
    assert "rank(s) 3 have no state on any node" in report.reason
    assert "none is behind" in report.reason  # the others all wait in #9


def test_every_rank_in_one_collective_points_at_the_collective_and_ras():
    dead = read_text_status((DATA / "nccl-ras" / "source-dead-2.29.txt").read_text())
    probes = _on_nodes(*(_probe(r, 9, 8, pid=3487981 + r) for r in range(4)))
    report = find_hang(probes, ras=[dead])
    assert report.outcome == "hang" and report.waited_for == []
    assert "every rank waits in collective #9" in report.reason and "RAS names 1 failing process(es)" in report.reason
    named = {(s.rank, s.node, s.severity) for s in report.ras}
    assert (3, "node-1", "error") in named and (2, "node-1", "warning") in named


def test_ras_json_flags_become_suspects():
    status = read_json_status((DATA / "nccl-ras" / "source-dead.json").read_text())
    found = ras_suspects(status)
    whys = {(s.comm_rank, s.why, s.severity) for s in found}
    assert (3, "communicator 0xcf264af53edbe986: considered dead", "error") in whys
    assert (2, "communicator 0xcf264af53edbe986: aborted", "error") in whys
    assert (2, "communicator 0xcf264af53edbe986: asynchronous error 6", "error") in whys
    assert (2, "communicator 0xcf264af53edbe986: launched AllReduce 1041 of 1042", "warning") in whys
    assert not any(s.comm_rank in (0, 1) for s in found)
    assert {(s.node, s.rank) for s in found} == {("", None)}  # no probe has their pids: RAS's address names them
    assert found[0].where() == "172.16.64.213 (NCCL RAS's address)"
    docs = ras_suspects(read_json_status((DATA / "nccl-ras" / "docs-status.json").read_text()))
    assert [(s.comm_rank, s.why) for s in docs] == [(1, "communicator 0xae94423cfbb2ef4a: unresponsive")]


def test_the_collective_a_stack_is_in():
    def stacks(name: str) -> Stacks:
        return Stacks(source="py-spy", threads=read_pyspy((DATA / "stacks" / name).read_text()))

    assert collective_of(stacks("pyspy-plain-all-reduce.txt")) == (
        "all_reduce (distributed_c10d.py:3252)", "all_reduce (distributed_c10d.py:3252)")
    frame, where = collective_of(stacks("pyspy-waiting-rank.txt"))
    assert frame == "_engine_run_backward (graph.py:979)" and "DDP's gradient all-reduce" in where
    assert collective_of(stacks("pyspy-stopped-rank.txt")) == ("main (timer_job.py:44)", "")
    assert collective_of(None) == ("", "")


def test_no_state_at_all_is_not_judged():
    report = find_hang([])
    assert report.outcome == "not judged" and "no rank state found" in report.reason


def _wait_for(folder: Path, ready, timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [read_state(p) for p in folder.glob("*.rank")]
        if ready([s for s in states if s]):
            return
        time.sleep(0.5)
    raise AssertionError(f"the job did not reach its hang within {timeout:.0f} s")


def test_a_real_hang_names_the_stopped_rank(tmp_path):
    """3 gloo ranks under torchrun, a plain loop timing its all-reduce; rank 2 stops itself (SIGSTOP) at step 3,
    ranks 0 and 1 hang in all_reduce. The probe of this node reads their states and stacks (py-spy where it is
    installed, else their own dumps)."""
    folder = tmp_path / "state"
    proc = subprocess.Popen(job_command("plain", 3, steps=1000, every=2, slow_ms=5, hang_at=3), env=job_env(folder),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(folder, lambda states: len(states) == 3 and sum(p.in_collective for _, p in states) == 2)
        time.sleep(3)
        probes = probe_ranks(folder, timeout_s=30).ranks
        report = find_hang([("this-node", p) for p in probes], stall_s=2)
    finally:
        for p in folder.glob("*.rank"):
            state = read_state(p)
            if state:
                try:
                    os.kill(state[0].pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert report.outcome == "hang", report.reason
    assert [(r.rank, r.node, r.state) for r in report.waited_for] == [(2, "this-node", "stopped")]
    waiting = [r for r in report.ranks if r.rank in (0, 1)]
    assert all(r.in_collective and r.launched == waiting[0].launched for r in waiting)
    assert all(r.collective.startswith("all_reduce") for r in waiting), [r.stacks for r in waiting]


def test_a_root_rank_of_the_flight_recorder_is_named_where_nothing_else_names_it():
    """The state files say every rank waits in the same collective (no count behind: a program whose own waits the
    timer does not see); the dumps recorded from the real 4-rank hang (tests/data/flight-recorder/gloo-4rank-stop)
    name rank 1 behind in its pair group: rank 1 is named on the recorder alone, on its node."""
    from gpuval.diagnosis.flight import analyze_dumps
    from gpuval.node.flight_dump import parse_dump

    stop = DATA / "flight-recorder" / "gloo-4rank-stop"
    flight = analyze_dumps({r: parse_dump((stop / f"rank_{r}").read_bytes()) for r in range(4)}, 4)
    report = find_hang(_on_nodes(*(_probe(r, 9, 8) for r in range(4))), flight=flight)
    [named] = report.waited_for
    assert (named.rank, named.node, named.evidence) == (1, "node-0", ("flight recorder",))
    assert named.why == "flight recorder: tp (1): rank(s) 0 entered collective #4 (gloo:all_reduce); rank(s) 1 did not"
    assert "every rank waits in collective #9" in report.reason and "the Flight Recorder names rank(s) 1 behind" in \
        report.reason
    assert find_hang(_on_nodes(*(_probe(r, 9, 8) for r in range(4)))).waited_for == []  # without it: none


def test_a_rank_held_inside_an_earlier_collective_by_the_stopped_rank_is_not_named():
    """Rank 1 stopped inside broadcast #8 (DDP's buffers, relayed through it): ranks 0 and 2 got theirs and launched
    the step's all-reduce #9; rank 3 still waits in #8. Rank 1 alone is named, rank 3's wait said in a note (seen
    on real Slurm under load: rank 3 on a healthy node was named beside the stopped one). A rank behind and not in
    a collective is still named beside a stopped one."""
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 8, 7, state="T"), _probe(2, 9, 8), _probe(3, 8, 7)))
    assert [r.rank for r in report.waited_for] == [1] and "rank(s) 1 hold up" in report.reason
    assert report.notes == ["rank 3 not named: it launched 8 collective(s), the waiting ranks 9, but it waits in "
                            "collective #8, and rank(s) 1 (halted) did not complete collective #8"]
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 8, 7, state="T"), _probe(2, 9, 8), _probe(3, 8, 8)))
    assert [r.rank for r in report.waited_for] == [1, 3] and not report.notes
    report = find_hang(_on_nodes(_probe(0, 9, 8), _probe(1, 9, 8, state="T"), _probe(2, 9, 8), _probe(3, 8, 7)))
    assert [r.rank for r in report.waited_for] == [1, 3]  # rank 1 completed #8: rank 3 waits there for another


def test_a_root_rank_of_the_flight_recorder_held_by_a_stopped_rank_without_a_dump_is_not_named():
    """Rank 1 is stopped (SIGSTOP: it dumps nothing), so the recorder sees only ranks 0, 2 and 3 (the real 4-rank
    hang's dumps, rank 1's left out): rank 0 is behind in the world group there, its root. But rank 0 waits in its
    7th collective, which stopped rank 1 has not completed: rank 1 alone is named, and the notes say why rank 0 is
    not (on real Slurm under load, a healthy node's rank was named so beside the stopped one)."""
    from gpuval.diagnosis.flight import analyze_dumps
    from gpuval.node.flight_dump import parse_dump

    stop = DATA / "flight-recorder" / "gloo-4rank-stop"
    flight = analyze_dumps({r: parse_dump((stop / f"rank_{r}").read_bytes()) for r in (0, 2, 3)}, 4)
    assert flight.root_ranks == [0]
    probes = _on_nodes(_probe(0, 7, 6), _probe(1, 6, 6, state="T"), _probe(2, 8, 7), _probe(3, 8, 7))
    report = find_hang(probes, flight=flight)
    assert [r.rank for r in report.waited_for] == [1], report.notes
    assert [n.split(":")[0] for n in report.notes] == ["rank 0 not named", "rank 0 not named"]
    assert "(halted, no dump) did not complete" in report.notes[1]
    assert [r.rank for r in find_hang(probes[:1] + probes[2:], flight=flight).waited_for] == [0]  # nothing holds it


def test_ranks_in_ddps_buffer_broadcast_held_by_the_stopped_rank_are_not_named():
    """Seen on real Slurm under load (tests/workloads/diagnose/test_slurm.py): rank 1 stopped inside all_reduce #1342
    after its part of it; ranks 0, 2 and 3 completed it; rank 2 got through the next forward's buffer broadcast and
    launched #1343, while ranks 0 and 3 wait in that broadcast (DDP's, in C++: the timer does not count it, so their
    state says no collective; their stacks say where). Rank 1 alone is named; a rank in that broadcast with nothing
    halted behind it is still named by its count."""
    def in_broadcast() -> Stacks:
        frames = [Frame(function="DistributedDataParallel._distributed_broadcast_coalesced",
                        file="/v/lib/python3.11/site-packages/torch/nn/parallel/distributed.py", line=2363),
                  Frame(function="forward", file="/v/lib/python3.11/site-packages/torch/nn/parallel/distributed.py",
                        line=1600), Frame(function="<module>", file="/job/train.py", line=9)]
        return Stacks(source="py-spy", threads=[ThreadStack(thread="1", name="MainThread", frames=frames)])

    frame, where = collective_of(in_broadcast())
    assert frame.startswith("DistributedDataParallel._distributed_broadcast_coalesced") and "buffer broadcast" in where
    probes = _on_nodes(_probe(0, 1342, 1342, stacks=in_broadcast()), _probe(1, 1342, 1341, state="T"),
                       _probe(2, 1343, 1342), _probe(3, 1342, 1342, stacks=in_broadcast()))
    report = find_hang(probes)
    assert [r.rank for r in report.waited_for] == [1], report.notes
    assert [n.split(":")[0] for n in report.notes] == ["rank 0 not named", "rank 3 not named"]
    assert "but it waits in DistributedDataParallel._distributed_broadcast_coalesced" in report.notes[0]
    alone = _on_nodes(_probe(0, 1342, 1342, stacks=in_broadcast()), _probe(1, 1343, 1342), _probe(2, 1343, 1342))
    assert [r.rank for r in find_hang(alone).waited_for] == [0]
