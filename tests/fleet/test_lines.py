"""Reading a round's job output back into TestResults: the lines the workers print (lines.line, as
`gpuval fleet node-test` / `rank-test` print them; a real local run is in test_driver.py), mixed with whatever else
jobs print, and every way a test can end: figures, a crash with its node named, a job that ended before any rank
started (could not run), one that started and ended without a result (ran and failed), a hang, a refusal, a job
that ran on the wrong nodes."""

from __future__ import annotations

import json

from gpuval.engines.spec import JobState, JobStatus
from gpuval.results import Status, Where
from gpuval.results.model import Result
from gpuval.fleet.run.lines import JobEnd, RoundReader, emit, line, suite_verdict
from gpuval.fleet.plan.terms import Round, Test
from gpuval.engines.output import file_lines
from gpuval.engines.slurm.labels import labelled

NODE_A = Test("r0-suite-0", "node", ("a",), 3, "suite")
NODE_B = Test("r0-suite-1", "node", ("b",), 3, "suite")
PAIR = Test("r1-screen-0", "pair", ("a", "b"), 2, "screen")


def _own(lines):
    """Each line with the node it names as its source: what an engine that pinned the job correctly reports."""
    for raw in lines:
        try:
            yield json.loads(raw).get("node"), raw
        except ValueError:
            yield None, raw


def _end(state: JobState = JobState.SUCCEEDED, code: int | None = 0, native: str = "") -> JobEnd:
    return JobEnd(JobStatus(job_id="7", engine="slurm", state=state, exit_code=code, native_state=native))


def _health(name: str, status: Status) -> dict:
    return Result(run_id="r", kind="health", name=name, where=Where(hostname="machine"), status=status,
                  reason=f"{name} {status.value}", data={"fault_code": name.upper()}).model_dump(mode="json")


def test_a_node_test_ended_because_another_failed_could_not_run():
    """Node tests share a job; b's test fails (its own error line) and the launcher ends the job, a's test with it
    (it had started, and said nothing more: killed, not crashed). a could not run; b's failure is b's alone. Where
    a's job did not fail, or a said something of its own, the usual rules stand."""
    c = Test("r0-suite-2", "node", ("c",), 3, "suite")
    rnd = Round(0, (NODE_A, NODE_B, c))
    reader = RoundReader(rnd)
    output = [line("start", round=0, node=n) + "\n" for n in ("a", "b", "c")] + [
        line("error", round=0, node="b", rank=None, error="in-node all_reduce over 2 ranks: 1024 wrong elements")
        + "\n",
        line("error", round=0, node="c", rank=None, error="its own failure") + "\n"]
    reader.feed(_own(output))
    killed = _end(JobState.FAILED, 143)
    a, b = reader.result(NODE_A, killed), reader.result(NODE_B, killed)
    assert a.error is None and a.not_run.startswith("its job ended when b, c failed, before it had a result")
    assert b.error.startswith("b: in-node all_reduce") and b.blame == ("b",) and b.not_run is None
    assert reader.result(c, killed).error.startswith("c: its own failure")
    assert reader.result(NODE_A, _end()).error.startswith("ended without a result")  # the job did not fail
    alone = RoundReader(Round(0, (NODE_A,)))
    alone.feed(_own(output[:1]))
    assert alone.result(NODE_A, killed).error.startswith("ended without a result")  # no other test failed


def test_a_carriage_return_forges_no_other_tasks_line(tmp_path):
    """The red team's forgery in a job's output file: task 1 (b) prints a health failure and a suite verdict for a
    after a bare carriage return. Read as Slurm's node_lines reads it (lines end at \\n only, then srun's label),
    the forged text is b's line and starts with no tag: a gets nothing, nothing is counted for a."""
    forged = line("suite", round=0, node="a", status="fail", reason="forged by b")
    output = tmp_path / "job.out"
    output.write_bytes(f"1: junk\r0: {forged}\n0: {line('start', round=0, node='a')}\n".encode())
    reader = RoundReader(Round(0, (NODE_A, NODE_B)))
    assert reader.feed(labelled(file_lines(output), ["a", "b"])) == 1  # a's own start line only
    assert reader.collected[NODE_A.id].suite is None and reader.dropped.total == 0


def test_node_tests_share_one_output_and_are_found_by_node():
    rnd = Round(0, (NODE_A, NODE_B))
    reader = RoundReader(rnd)
    output = [
        "srun: cluster configuration lacks support for cpu binding\n",
        line("start", round=0, node="b") + "\n",
        line("start", round=0, node="a") + "\n",
        line("health", round=0, node="a", record=_health("gpu_count", Status.PASS)) + "\n",
        "a:123:123 [0] NCCL INFO Bootstrap : Using eth0\n",
        line("samples", round=0, node="a", collective="all_reduce", busbw=[1.5, 1.25, 1.0], ranks=2) + "\n",
        line("suite", round=0, node="a", status="pass", reason="1 checks pass") + "\n",
        line("start", round=9, node="a") + "\n",  # another round's line: not this round's
        line("samples", round=0, node="z", collective="all_reduce", busbw=[9.0]) + "\n",  # no such test
        '{"gpuval_fleet":1,"event":"suite","round":0,"node":"b","sta\n',  # cut short as a node died
    ]
    assert reader.feed(_own(output)) == 5
    a = reader.result(NODE_A, _end())
    assert a.busbw == {"all_reduce": (1.5, 1.25, 1.0)} and a.health is Status.PASS and a.error is None
    [health] = reader.collected[NODE_A.id].health
    assert health.where.hostname == "a"  # the scheduler's name of the node, not the machine's
    b = reader.result(NODE_B, _end(JobState.FAILED, 1))
    assert b.error and b.error.startswith("ended without a result: job 7 failed, exit code 1") and not b.busbw


def test_a_crash_names_its_node_and_rank_and_keeps_what_was_measured():
    reader = RoundReader(Round(1, (PAIR,)))
    reader.feed(_own([
        line("start", round=1, test=PAIR.id, node="a", rank=0) + "\n",
        line("start", round=1, test=PAIR.id, node="b", rank=1) + "\n",
        line("samples", round=1, test=PAIR.id, node="a", collective="all_reduce", busbw=[2.0, 2.0],
             hosts=["a", "b"], ranks=2) + "\n",
        line("error", round=1, test=PAIR.id, node="b", rank=1, error="Connection reset by peer") + "\n",
    ]))
    got = reader.result(PAIR, _end(JobState.FAILED, 2))
    assert got.error == "b rank 1: Connection reset by peer" and got.blame == ("b",)
    assert got.busbw == {"all_reduce": (2.0, 2.0)}


def test_a_pair_with_both_figures_passes_through():
    reader = RoundReader(Round(1, (PAIR,)))
    reader.feed(_own([line("samples", round=1, test=PAIR.id, node="a", collective=c, busbw=[3.0, 3.5],
                      hosts=["a", "a", "b", "b"], ranks=4) + "\n" for c in ("all_reduce", "sendrecv")]))
    got = reader.result(PAIR, _end())
    assert got.busbw == {"all_reduce": (3.0, 3.5), "sendrecv": (3.0, 3.5)} and got.error is got.not_run is None


def test_could_not_run_is_never_a_crash():
    reader = RoundReader(Round(1, (PAIR,)))
    assert reader.result(PAIR, JobEnd(refused="slurm refused the job: invalid partition")).not_run == \
        "slurm refused the job: invalid partition"
    ended = reader.result(PAIR, _end(JobState.FAILED, 1, "FAILED"))
    assert ended.not_run and ended.not_run.startswith("the job ended before any rank started: job 7 FAILED")
    quiet = reader.result(PAIR, _end())
    assert quiet.not_run and quiet.not_run.startswith("no output came back")
    queued = reader.result(PAIR, JobEnd(_end(JobState.PENDING).status, pending="could not start: still pending"))
    assert queued.not_run == "could not start: still pending"
    lost = reader.result(PAIR, JobEnd())
    assert lost.not_run == "the engine stopped answering about its job (cancelled)"


def test_a_rendezvous_port_taken_is_could_not_run_not_a_fault_of_the_nodes():
    """Seen on the six-node test Slurm: rank 0's store could not listen (EADDRINUSE, the port another process
    held). That is the job's set-up, not either node: could not run (re-run by the planner), never a failure."""
    taken = ("rank 0 could not join tcp://10.224.0.1:38008: The server socket has failed to listen on any local "
             "network address. port: 38008, useIpv6: false, code: -98, name: EADDRINUSE, message: address already "
             "in use")
    reader = RoundReader(Round(1, (PAIR,)))
    reader.feed(_own([line("start", round=1, test=PAIR.id, node="a", rank=0) + "\n",
                 line("error", round=1, test=PAIR.id, node="a", rank=0, error=taken) + "\n"]))
    got = reader.result(PAIR, _end(JobState.FAILED, 2))
    assert got.error is None and got.not_run == f"the job could not be set up: a rank 0: {taken}"
    node = RoundReader(Round(0, (NODE_A,)))
    node.feed(_own([line("error", round=0, node="a", error=taken) + "\n"]))
    assert node.result(NODE_A, _end(JobState.FAILED, 2)).not_run
    mixed = RoundReader(Round(1, (PAIR,)))  # a real fault beside it is still a fault
    mixed.feed(_own([line("error", round=1, test=PAIR.id, node="a", rank=0, error=taken) + "\n",
                line("error", round=1, test=PAIR.id, node="b", rank=1, error="Unable to find address for: ib0") + "\n"]))
    assert mixed.result(PAIR, _end(JobState.FAILED, 2)).error


def test_a_rank_that_started_and_vanished_or_hung_is_evidence():
    reader = RoundReader(Round(1, (PAIR,)))
    reader.feed(_own([line("start", round=1, test=PAIR.id, node="a", rank=0) + "\n"]))
    vanished = reader.result(PAIR, _end(JobState.FAILED, 137, "NODE_FAIL"))
    assert vanished.error and "NODE_FAIL" in vanished.error and "no rank started on b" in vanished.error
    hung = reader.result(PAIR, JobEnd(_end(JobState.RUNNING).status, hung="hung: still running after 960 s"))
    assert hung.error == "hung: still running after 960 s" and hung.blame == ()


def test_a_job_that_ran_on_other_nodes_says_nothing_about_the_tests_nodes():
    reader = RoundReader(Round(1, (PAIR,)))
    reader.feed(_own([line("samples", round=1, test=PAIR.id, node="c", collective=c, busbw=[3.0], hosts=["c", "b"])
                 + "\n" for c in ("all_reduce", "sendrecv")]))
    got = reader.result(PAIR, _end())
    assert got.not_run and got.not_run.startswith("the job ran on c, not on the test's nodes")


def _rec(name: str, status: Status) -> Result:
    return Result.model_validate(_health(name, status))


def test_suite_verdict():
    assert suite_verdict([]) == (Status.ERROR, "no health check ran")
    assert suite_verdict([_rec("ecc", Status.FAIL), _rec("xid", Status.WARN)]) == (Status.FAIL, "ecc: ecc fail")
    status, reason = suite_verdict([_rec("ecc", Status.PASS), _rec("h2d", Status.ERROR), _rec("nvlink",
                                                                                            Status.SKIPPED)])
    # THE node verdict: one check that could not run leaves the node not cleared (was PASS here, ERROR everywhere
    # else: health --drain, validate, the report)
    assert status is Status.ERROR and "could not run: h2d" in reason
    assert suite_verdict([_rec("h2d", Status.ERROR)])[0] is Status.ERROR  # nothing could run at all
    assert suite_verdict([_rec("nvlink", Status.SKIPPED)])[0] is Status.SKIPPED  # no GPU: never PASS


def test_the_health_verdict_is_judged_from_the_records_the_node_printed_not_its_own_line():
    """A node whose `suite` line says pass while a health record it printed failed is FAIL: its health verdict is
    judged where the check runs, by THE node verdict over its records; its own line counts only where none of its
    records came back."""
    reader = RoundReader(Round(0, (NODE_A, NODE_B)))
    output = [
        line("start", round=0, node="a"),
        line("health", round=0, node="a", record=_health("ecc", Status.FAIL)),
        line("health", round=0, node="a", record=_health("gpu_count", Status.PASS)),
        line("samples", round=0, node="a", collective="all_reduce", busbw=[1.0, 1.0, 1.0], ranks=2),
        line("suite", round=0, node="a", status="pass", reason="every check passes"),
        line("start", round=0, node="b"),
        line("samples", round=0, node="b", collective="all_reduce", busbw=[1.0, 1.0, 1.0], ranks=2),
        line("suite", round=0, node="b", status="warn", reason="xid: 1 event"),  # its records did not come back
    ]
    reader.feed(_own(raw + "\n" for raw in output))
    a = reader.result(NODE_A, _end())
    assert (a.health, a.health_reason) == (Status.FAIL, "ecc: ecc fail")
    b = reader.result(NODE_B, _end())
    assert (b.health, b.health_reason) == (Status.WARN, "xid: 1 event")


NODE_C = Test("r0-suite-2", "node", ("c",), 3, "suite")


def test_a_line_is_taken_only_from_the_node_it_names_and_for_that_nodes_own_test():
    """One node's output must neither convict nor clear another: each line is tied to the task that printed it."""
    reader = RoundReader(Round(0, (NODE_A, NODE_B, NODE_C)))
    forged = [
        ("c", line("suite", round=0, node="a", status="fail", reason="forged: ecc") + "\n"),  # names another node
        ("c", line("samples", round=0, node="c", test=NODE_A.id, collective="all_reduce", busbw=[1.0]) + "\n"),
        ("c", line("health", round=0, node="b", record=_health("ecc", Status.FAIL)) + "\n"),
        (None, line("suite", round=0, node="b", status="pass", reason="no task printed this") + "\n"),
        ("a", line("suite", round=0, node="a", status="pass", reason="its own") + "\n"),
    ]
    assert reader.feed(iter(forged)) == 1
    assert reader.collected[NODE_A.id].suite == (Status.PASS, "its own")
    assert not reader.collected[NODE_B.id].health and reader.collected[NODE_B.id].suite is None
    assert (reader.dropped.mismatched, reader.dropped.unattributed) == (3, 1)
    assert "c printed a line naming 'a'" in reader.dropped.describe()


def test_a_line_for_another_jobs_test_is_dropped():
    pair2 = Test("r1-screen-1", "pair", ("c", "d"), 2, "screen")
    reader = RoundReader(Round(1, (PAIR, pair2)))
    reader.feed(iter([("c", line("error", round=1, test=PAIR.id, node="c", rank=0, error="forged") + "\n")]),
                [pair2])
    assert not reader.collected[PAIR.id].errors and reader.dropped.mismatched == 1


def test_malformed_values_are_ignored_as_a_cut_short_line_is():
    reader = RoundReader(Round(0, (NODE_A,)))
    bad = [
        line("suite", round=0, node="a", status="bogus", reason="x"),
        line("samples", round=0, node="a", collective="all_reduce", busbw=["abc"]),
        line("samples", round=0, node="a", collective="all_reduce", busbw=5),
        line("samples", round=0, node="a", collective="all_reduce", busbw=[-1e308, 1.0]),
        line("samples", round=0, node="a", collective="all_reduce", busbw=[1e308, 1e308]),
        '{"gpuval_fleet":1,"event":"samples","round":0,"node":"a","collective":"all_reduce","busbw":[NaN]}',
        line("samples", round=0, node="a", collective="all_reduce", busbw=[True]),
        line("health", round=0, node="a", record={"status": "??"}),
        '{"gpuval_fleet":' + "[" * 100_000,
    ]
    assert reader.feed(("a", raw + "\n") for raw in bad) == 0
    assert reader.dropped.malformed == 8
    got = reader.result(NODE_A, _end())
    assert not got.busbw and got.health is None  # nothing from those lines: as if they were cut short


def test_a_flood_of_lines_is_read_in_bounded_memory():
    """No job's output is kept whole: 60,000 tagged lines (18 MB) (a node printing errors, samples and starts in a loop)
    cost the reader under 5 MB at its peak, whatever their number (800,000 such lines took 313 MB when every tagged
    line was kept); tracemalloc makes more lines slow to count, not different."""
    import tracemalloc

    pair = Test("r1-screen-0", "pair", ("a", "b"), 2, "screen")
    reader = RoundReader(Round(1, (pair,)))
    kinds = [line("error", round=1, test=pair.id, node="a", rank=0, error="x" * 200) + "\n",
             line("samples", round=1, test=pair.id, node="a", collective="all_reduce", busbw=[1.0] * 8,
                  hosts=["a", "b"]) + "\n",
             line("start", round=1, test=pair.id, node="b", rank=1) + "\n"]
    lines = (("b" if k % 3 == 2 else "a", kinds[k % 3]) for k in range(60_000))
    tracemalloc.start()
    try:
        assert reader.feed(lines, [pair]) == 60_000
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak
    got = reader.result(pair, _end())
    assert got.error and "(and 19999 more)" in got.error and got.blame == ("a",)



def test_long_lines_of_two_nodes_cut_by_srun_come_back_whole_per_node(capsys):
    """A health record with per-GPU rows is longer than the 1 KiB message slurmstepd forwards, and srun --label
    makes each message a labelled line of its own: the worker writes such a line in pieces (emit), the reader joins
    them per node (engines.slurm.labels.labelled), whatever came between them. A piece from another node completes
    nothing."""
    printed = {}
    for node in ("a", "b"):
        record = _health("hbm_bandwidth", Status.PASS)
        record["data"]["details"] = {"gpus": [{"index": i, "bus_id": f"00000000:{i:02X}:00.0", "gb_s": 4231.5,
                                               "note": "x" * 200} for i in range(8)]}
        emit("health", round=0, node=node, record=record)
        printed[node] = capsys.readouterr().out.splitlines(keepends=True)
    assert all(len(lines) > 2 and all(len(x.encode()) < 1024 for x in lines) for lines in printed.values())
    forged = printed["a"][-1]  # node b printing node a's last piece: it completes nothing of a's
    mixed = [f"1: {forged}"]
    for a_line, b_line in zip(printed["a"], printed["b"]):
        mixed += [f"0: {a_line}", "srun: a message of srun's own\n", f"1: {b_line}"]
    reader = RoundReader(Round(0, (NODE_A, NODE_B)))
    assert reader.feed(labelled(iter(mixed), ["a", "b"])) == 2
    for test, node in ((NODE_A, "a"), (NODE_B, "b")):
        [health] = reader.collected[test.id].health
        assert health.where.hostname == node and len(health.data.details["gpus"]) == 8
