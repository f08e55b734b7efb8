"""The Flight Recorder in a job's diagnosis, on the dumps recorded from a real 4-rank gloo hang
(tests/data/flight-recorder/gloo-4rank-stop: rank 1 stopped in Python before its pair group's 4th all_reduce; rank 0
waits in it; ranks 2 and 3 wait in the world's 4th): each node's answer carries its ranks' dumps (compacted, read
back whole through the answer's lines), the diagnosis analyses them together and joins the root rank to the hang's
evidence beside the state files', and the suspects, the terminal, --json and the page say which evidence each
finding rests on. The ranks' state is built to the plan of that job as the step timer would have kept it (each
collective in `timer.wait()`): the live probe is proven on real Slurm (test_slurm.py) and on this node
(tests/workloads/diagnose/test_flight_probe.py)."""

from __future__ import annotations

from pathlib import Path

from gpuval.cli.render import diagnosis_lines
from gpuval.engines.probe import Placement, ProbeOutput
from gpuval.node.flight_dump import parse_dump
from gpuval.node.flight_recorder import RankDump
from gpuval.node.rank_probe import RankProbe
from gpuval.node.rank_state import Identity, Progress
from gpuval.report.job import render_job_html
from gpuval.workloads.diagnose.dumps import FULL
from gpuval.workloads.diagnose.output import JobOutput
from gpuval.workloads.diagnose.probe import NodeProbe, probe_lines, read_probes
from gpuval.workloads.diagnose.run import DiagnoseRequest, judge

DATA = Path(__file__).resolve().parents[2] / "data" / "flight-recorder" / "gloo-4rank-stop"
NOW = 10_000.0
LAUNCHED = {0: 7, 1: 6, 2: 8, 3: 8}  # 3 steps of 2 all_reduces, then: rank 0 in tp #4, 1 before it, 2-3 in world #4


def _rank(rank: int) -> RankProbe:
    identity = Identity(rank=rank, local_rank=rank % 2, world=4, host="vm", pid=500 + rank, job="8812",
                        started=NOW - 300, proc_start=1000 + rank)
    waits = rank != 1
    progress = Progress(step=3, steps_done=3, launched=LAUNCHED[rank], completed=LAUNCHED[rank] - waits,
                        in_wait=waits, step_begun_at=NOW - 130, progress_at=NOW - 120)
    return RankProbe(identity=identity, progress=progress, state="S", read_at=NOW)


def _dump(rank: int) -> RankDump:
    dump = parse_dump((DATA / f"rank_{rank}").read_bytes()).compact(*FULL)
    return RankDump(rank=rank, source="pipe", path=f"/tmp/gpuval-ranks-0/fr-8812-{rank}", named_by="gpuval's stem",
                    dumped_at=NOW, dump=dump)


def _answers() -> list[tuple[str, NodeProbe]]:
    """Each node's answer as it crosses the engine: printed in lines, read back per node."""
    lines = []
    for node, ranks in (("d1", (0, 1)), ("d2", (2, 3))):
        answer = NodeProbe(host="vm", read_at=NOW, ranks=[_rank(r) for r in ranks], dumps=[_dump(r) for r in ranks])
        lines += [(node, line) for line in probe_lines(answer)]
    return read_probes(lines)


def test_the_recorded_dumps_name_the_rank_behind_in_its_group_as_hang_evidence(tmp_path):
    answers = _answers()
    assert [len(a.dumps) for _, a in answers] == [2, 2] and answers[0][1].dumps[0] == _dump(0)
    diag = judge(DiagnoseRequest("8812", "run-1", stall_s=60), "slurm", Placement(["d1", "d2"]),
                 [ProbeOutput("d1"), ProbeOutput("d2")], answers, JobOutput([]))
    tp = next(f for f in diag.flight.findings if f.desc == "tp")
    assert (diag.flight.root_ranks, tp.kind, tp.seq, tp.entered, tp.behind, tp.root) == \
        ([1], "not entered by all", 4, [0], [1], True)
    assert diag.flight_sources == {0: "d1: asked through its pipe", 1: "d1: asked through its pipe",
                                   2: "d2: asked through its pipe", 3: "d2: asked through its pipe"}
    hang = diag.hang
    # the state files' counts name ranks 0 and 1 (behind the 8 of ranks 2 and 3); the recorder shows rank 0
    # waiting in tp #4 for rank 1: rank 1 is named on both, rank 0 is not named, and a note says why
    assert [(r.rank, r.node, r.evidence) for r in hang.waited_for] == [(1, "d1", ("state file", "flight recorder"))]
    assert "flight recorder: tp (1): rank(s) 0 entered collective #4 (gloo:all_reduce); rank(s) 1 did not" in \
        hang.waited_for[0].why
    assert hang.notes == ["rank 0 not named: it launched 7 collective(s), the waiting ranks 8, but its Flight "
                          "Recorder shows it waiting in tp #4 for rank(s) 1"]
    assert "the Flight Recorder names rank(s) 1 behind" in hang.reason
    [suspect] = diag.suspects
    assert (suspect.node, suspect.ranks, suspect.sources) == ("d1", [1], ["hang", "flight recorder"])
    assert suspect.why[0].endswith("(evidence: state file, flight recorder)")

    shown = diagnosis_lines(diag)
    at = shown.index("  flight recorder (root): tp (1): rank(s) 0 entered collective #4 (gloo:all_reduce); rank(s) 1 "
                     "did not")
    assert shown[at + 1:at + 4] == [
        "    gloo:all_reduce #4: input sizes [[64, 4]], Float",
        "    rank 1: not entered (its last: #3 gloo:all_reduce [[64, 4]]) at tensor_parallel_reduce "
        "(flight_hang.py:33)",
        "    rank 0: entered (#4 gloo:all_reduce [[64, 4]]) at tensor_parallel_reduce (flight_hang.py:33)"]
    assert "  flight recorder: root rank(s) 1" in shown

    doc = diag.to_json()
    assert doc["flight"]["root_ranks"] == [1] and doc["hang"]["waited_for"][0]["evidence"] == \
        ["state file", "flight recorder"]
    page = render_job_html(diag)
    assert "tp (1): not entered by all at collective #4" in page and "tensor_parallel_reduce (flight_hang.py:33)" \
        in page and "d1: asked through its pipe" in page and "state file, flight recorder" in page
