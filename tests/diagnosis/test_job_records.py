"""A job's step records as the engine attributes its lines: rank -> the node that printed them (not the process's
claim), a rank seen on two nodes said, pids named back to ranks, other lines passed over."""

from __future__ import annotations

from gpuval.diagnosis.job_records import rank_list, read_job_records
from gpuval.hooks.record import Stats, StepRecord


def _line(rank: int, host: str, pid: int, first: int, t1: float) -> str:
    s = Stats(1.0, 0.1, 0.1)
    return StepRecord(rank=rank, local_rank=0, world=4, host=host, pid=pid, first=first, last=first + 9, n=10,
                      t0=t1 - 1, t1=t1, step_s=s, compute_s=s, wait_s=s).to_line()


def test_ranks_are_placed_by_the_lines_node():
    lines = [("n1", _line(0, "n1", 10, 0, 1.0)), ("n1", "NCCL INFO something"),
             ("n2", "0: " + _line(1, "vm", 11, 0, 1.0)),
             ("n2", _line(2, "vm.cluster.local", 12, 0, 1.0)), ("n1", "gpuval-step {broken")]
    found = read_job_records(lines)
    assert found.node_of == {0: "n1", 1: "n2", 2: "n2"} and found.world() == 4
    assert found.rank_of("n2", 12) == 2 and found.rank_of("n1", 12) is None
    assert found.notes == ["rank(s) 1 call their host 'vm'; their lines are attributed to n2",
                           "rank(s) 2 call their host 'vm.cluster.local'; their lines are attributed to n2"]


def test_a_rank_that_moved_is_placed_where_it_reported_last_and_said():
    found = read_job_records([("n1", _line(0, "n1", 10, 0, 1.0)), ("n3", _line(0, "n3", 99, 0, 5.0))])
    assert found.node_of == {0: "n3"} and found.latest()[0].pid == 99
    assert "rank 0's records came from n1 and from n3" in found.notes


def test_rank_lists_for_people():
    assert rank_list([9, 0, 1, 2, 3, 12, 13, 5]) == "0-3, 5, 9, 12-13" and rank_list([]) == ""
