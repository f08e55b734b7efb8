"""What a job prints is bounded (reliability-4 D10, D12): a `world` its records or its ranks claim is never counted
up to, thousands of stragglers cost linear time, and a rank that claims a host outside the job nominates no node and
stores no record (it is a note). Pure functions on records and probes built to a plan, as tests/diagnosis's others
(tests/diagnosis/test_straggler.py's windows, test_hang.py's probes)."""

from __future__ import annotations

import time
import tracemalloc

from gpuval.diagnosis.hang import find_hang
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.hooks.record import StepRecord
from tests.diagnosis.test_hang import _on_nodes, _probe
from tests.diagnosis.test_straggler import NODES, _window

BILLION = 10**9


def _claiming(world: int, records: list[StepRecord]) -> list[StepRecord]:
    return [StepRecord(**{**r.__dict__, "world": world}) for r in records]


def test_d10_a_world_of_a_billion_in_30_records_costs_no_memory():
    """reliability-4: 30 step records claiming `"world": 1000000000` were a MemoryError (set(range(world)) per
    window); a hang with one probed rank built a row per missing rank up to `world`. Both now find the ranks
    below `world` that nobody saw from the ranks seen, and say them as one run."""
    records = _claiming(BILLION, [r for w in range(3) for r in _window(10, w, {r: 0.1 for r in range(10)})])
    probes = _on_nodes(*(_probe(r, 9, 8, world=BILLION) for r in range(4)))
    tracemalloc.start()
    try:
        straggler = find_stragglers(records, NODES)
        hang = find_hang(probes, world=BILLION, node_of={5: "node-2"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # under a MiB, where a set of range(10**9) is tens of GB
    assert "rank(s) 10-999999999 missing from some windows" in straggler.notes[0]
    assert hang.outcome == "hang" and [(r.rank, r.node) for r in hang.waited_for] == [(5, "node-2")]
    assert "rank(s) 4-999999999 have no state on any node" in hang.reason


def test_d10_thousands_of_stragglers_take_linear_time():
    """reliability-4: 2N+1 ranks of which N compute longer took 22 s at N=2000 (every straggler rescanned every
    window's rows). Each straggler is now looked up by rank in its windows: N=2000 takes a fraction of a second
    of this process's CPU time."""
    slow = 2000
    records = [r for w in range(3) for r in _window(2 * slow + 1, w, {
        r: 0.15 if r % 2 else 0.10 for r in range(2 * slow + 1)})]
    started = time.process_time()
    report = find_stragglers(records)
    spent = time.process_time() - started
    assert report.outcome == "straggler" and len(report.stragglers) == slow
    assert spent < 1.0, spent
    assert report.reason.startswith("straggler(s): rank(s) 1, 3, 5, ") and "and 1968 more" in report.reason


def _lines(ranks: int, slow: dict[int, str], windows: int = 4) -> list[tuple[str | None, str]]:
    """A job's output without srun's labels (no node per line), `slow` ranks computing longer and each claiming
    the host given."""
    records = [r for w in range(windows) for r in _window(ranks, w, {r: 0.15 if r in slow else 0.10
                                                                     for r in range(ranks)})]
    return [(None, StepRecord(**{**r.__dict__, "host": slow.get(r.rank, "n1")}).to_line()) for r in records]


def _diagnosed(lines: list[tuple[str | None, str]], placed: dict[int, str]):
    from gpuval.diagnosis.job_diagnosis import JobDiagnosis, nominate
    from gpuval.diagnosis.job_records import read_job_records
    from gpuval.workloads.diagnose.records import job_records

    recs = read_job_records(lines, placed)
    diag = JobDiagnosis("4242", "slurm", run_id="20261128T000000Z-abcdef", node_of={**placed, **recs.node_of},
                        probed={"n1": ""}, straggler=find_stragglers(recs.records, {**placed, **recs.node_of}))
    diag.suspects = nominate(diag)
    return diag, job_records(diag)


def test_d12_a_rank_claiming_a_host_outside_the_job_is_a_note_not_a_suspect_or_a_record():
    """reliability-4 D12: a 1-node job on n1 printed the step records of 4 ranks, rank 3 slow and claiming
    "host": "gpu-node-999"; no engine label and no probe placed rank 3, so the diagnosis nominated gpu-node-999
    and stored a `job` record for it (which the exporter then served). Suspects and records are now the job's
    nodes' only (probed, or placed by the engine); the straggler is still found and said in a note."""
    diag, records = _diagnosed(_lines(4, {3: "gpu-node-999"}), {0: "n1", 1: "n1", 2: "n1"})
    assert [s.rank for s in diag.straggler.stragglers] == [3]
    assert diag.suspects == [] and [(r.where.hostname, r.status.value) for r in records] == [("n1", "skipped")]
    assert "straggler: rank(s) 3 not nominated: no node of the job places them (they name gpu-node-999)" in diag.notes


def test_d12_hundreds_of_ghost_hosts_make_one_record_and_one_note():
    """The review's scale: 301 ranks, 150 slow, each claiming a host of its own, gave 151 records (and filled the
    exporter's host table). Now: the job's one node's record, one note naming five of the hosts."""
    slow = {r: f"ghost-{r}" for r in range(151, 301)}
    diag, records = _diagnosed(_lines(301, slow), {r: "n1" for r in range(151)})
    assert len(diag.straggler.stragglers) == 150 and diag.suspects == []
    assert [r.where.hostname for r in records] == ["n1"]
    [note] = [n for n in diag.notes if "not nominated" in n]
    assert note.startswith("straggler: rank(s) 151-300 not nominated") and note.endswith("and 145 more)")


def test_d10_naming_every_ranks_pid_is_linear():
    """The NCCL network names each rank by the pid its step records give (JobRecords.rank_of): asked for each of
    4,001 ranks, and for as many pids no record has (NCCL processes without the timer), over 3 windows of records,
    it used to scan every record each time (1.6 s of CPU for the second half alone); now one index."""
    from gpuval.diagnosis.job_records import JobRecords

    ranks = 4001
    found = JobRecords([r for w in range(3) for r in _window(ranks, w, dict.fromkeys(range(ranks), 0.1))],
                       {rank: f"n{rank % 8}" for rank in range(ranks)})
    started = time.process_time()
    named = [found.rank_of(f"n{rank % 8}", 100 + rank) for rank in range(ranks)]
    elsewhere = [found.rank_of(f"n{(rank + 1) % 8}", 100 + rank) for rank in range(ranks)]  # a pid of no record
    assert time.process_time() - started < 0.3 and named == list(range(ranks)) and set(elsewhere) == {None}
