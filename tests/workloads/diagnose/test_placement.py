"""Where a job's ranks ran (reliability-4 D5): a rank whose probe found it on a node is placed there, whatever srun's
labels suggest, and an engine whose placement of the output disagrees with a probe is taken for no line; srun's
labels of a job gpuval did not send are read with the one layout of every step that could have printed them, and
not at all where Slurm cannot tell it (red team 5 N2: a step that ended with another layout).

The review's job: `sbatch -N 2` (Slurm counts 2 tasks) running `srun --label --ntasks-per-node=2`, rank 1 slow on
n1. Its placements as the review printed them: the probes found {0: n1, 1: n1, 2: n2, 3: n2}; the labels read with
the job's task count put task 1 on n2 and tasks 2-3 on no node. The step records are the timer's own lines (rank 1
computes 60 ms a step against the others' 20 ms). The real step on real Slurm is in test_slurm.py."""

from __future__ import annotations

from gpuval.diagnosis.straggler import find_stragglers
from gpuval.engines.probe import Placement, ProbeOutput
from gpuval.engines.slurm.labels import step_tasks
from gpuval.engines.slurm.engine import PROBE_STEP
from gpuval.engines.slurm.steps import Step, label_layout, read_sacct_steps
from gpuval.hooks.record import Stats, StepRecord
from gpuval.workloads.diagnose.output import JobOutput
from gpuval.workloads.diagnose.probe import NodeProbe
from gpuval.workloads.diagnose.run import DiagnoseRequest, judge, place
from tests.conftest import DATA

FOUND = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}  # what the probes found
LABELS = {0: "n1", 1: "n2", 2: None, 3: None}  # the labels read with the job's 2 tasks over 2 nodes


def _lines(node_of: dict[int, str | None]) -> list[tuple[str | None, str]]:
    lines = []
    for window in range(5):
        for rank in range(4):
            compute = 0.060 if rank == 1 else 0.020
            step = 0.062
            record = StepRecord(rank=rank, local_rank=rank % 2, world=4, host=FOUND[rank], pid=100 + rank,
                                first=window * 10, last=window * 10 + 9, n=10, t0=1000.0 + window,
                                t1=1001.0 + window, step_s=Stats(step * 10, step, step),
                                compute_s=Stats(compute * 10, compute, compute),
                                wait_s=Stats((step - compute) * 10, step - compute, step - compute))
            lines.append((node_of[rank], record.to_line()))
    return lines


def test_a_rank_a_probe_found_is_placed_where_it_was_found_and_the_slow_node_is_named():
    lines, recs, node_of = place(_lines(LABELS), FOUND)
    assert node_of == FOUND and all(node is None for node, _ in lines)
    assert recs.notes[0].startswith("the engine's placement of the job's output disagrees with the probes (rank 1 "
                                    "on n2, found on n1)")
    [slow] = find_stragglers(recs.records, node_of).stragglers
    assert (slow.rank, slow.node) == (1, "n1")


def test_an_engine_that_agrees_with_the_probes_keeps_its_word():
    right = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    lines, recs, node_of = place(_lines(right), {1: "n1"})
    assert node_of == right and [node for node, _ in lines[:4]] == ["n1", "n1", "n2", "n2"] and not recs.notes


def test_a_steps_layout_as_slurm_gives_it():
    assert step_tasks(["n1", "n2"], 4, "Block") == ["n1", "n1", "n2", "n2"]
    assert step_tasks(["n1", "n2"], 4, "Cyclic") == ["n1", "n2", "n1", "n2"]
    assert step_tasks(["n1", "n2"], 3, "Block") is None  # uneven: Slurm's split is not told by these alone
    assert step_tasks(["n1", "n2"], 4, "Plane") is None and step_tasks(["n1"], 2, "") is None
    assert step_tasks([], 4, "Block") is None


TRAIN = Step(1, "train", 4, "n[1-2]", "Block")  # the running step: tasks 0-1 on n1, 2-3 on n2


def test_labels_are_read_only_by_the_one_layout_of_every_step_that_could_have_printed_them():
    """Red team 5 N2: srun's label names the task, not the step. Step 1 runs two tasks a node; step 0, a one-task-per-
    node pre-flight, ended: Slurm without accounting no longer tells of it, so no layout reads the labels; with
    accounting (sacct), a step 0 laid out as step 1 leaves them readable, and one laid out otherwise leaves unread the
    labels it places elsewhere (its task 1 on n2, step 1's on n1); labels past its tasks are step 1's alone."""
    placed = ["n1", "n1", "n2", "n2"]
    assert label_layout([TRAIN]) == []  # step 0 ran; Slurm no longer tells of it
    assert label_layout([Step(0, "preflight", 2, "n[1-2]", "Block"), TRAIN]) == ["n1", None, "n2", "n2"]
    assert label_layout([Step(0, "warm", 4, "n[1-2]", "Block"), TRAIN]) == placed
    assert label_layout([Step(0, "train", 4, "n[1-2]", "Block"), Step(1, "monitor", 2, "n2", "Block")]) == [
        None, None, "n2", "n2"]
    assert label_layout([Step(0, "train", 4, "n[1-2]", "Block,Pack")]) == []  # packed: not told by these alone
    assert label_layout([Step(0, "train", 4, "n[1-2]", "Block"), Step(1, "x", 2, "n[1-2]", "Plane")]) == []
    assert label_layout([]) == []


def test_r2_a_step_is_counted_whatever_its_name_gpuvals_probes_too():
    """Red team 6 R2: gpuval's probe steps were left out by their name, and a job's own step named so was too: its
    task 1 on n2 printed an NCCL line read as n1's. Names have no say now: the job's `gpuval-probe` step leaves label
    1 unread, and gpuval's probes (one task on each node) leave label 0 unread and the rest as the training's."""
    forged = Step(0, PROBE_STEP, 2, "n[1-2]", "Block")
    assert label_layout([forged, TRAIN]) == ["n1", None, "n2", "n2"]
    probes = [Step(1, PROBE_STEP, 1, "n1", "Block"), Step(2, PROBE_STEP, 1, "n2", "Block")]
    assert label_layout([Step(0, "train", 4, "n[1-2]", "Block"), *probes]) == [None, "n1", "n2", "n2"]
    assert label_layout([Step(0, "train", 4, "n[1-2]", "Block"), probes[0]]) == ["n1", "n1", "n2", "n2"]


def test_the_steps_accounting_holds_as_sacct_prints_them():
    """`sacct -j J -n -P -o JobIDRaw,NTasks,NodeList,Layout,JobName`, as Slurm 22.05 prints it for a job whose
    pre-flight step 0 ended (written here by hand in that format: this machine's Slurm keeps no accounting). Only
    the job's numbered steps are read; a name holding the separator stays whole."""
    text = ("4242||n[1-2]||job.sh\n4242.batch|1|n1|Unknown|batch\n4242.extern|2|n[1-2]|Block|extern\n"
            "4242.0|2|n[1-2]|Block|pre|flight\n4242.1|4|n[1-2]|Block:Cyclic|train\n4243.2|4|n[1-2]|Block|other\n"
            "4242.2+0|1|n1|Block|het\n")
    steps = read_sacct_steps("4242", text)
    assert steps == [Step(0, "pre|flight", 2, "n[1-2]", "Block"), Step(1, "train", 4, "n[1-2]", "Block")]
    assert label_layout(steps) == ["n1", None, "n2", "n2"]  # task 1: n2 in step 0, n1 in step 1


def test_nccl_lines_no_node_places_judge_no_node_and_are_said():
    """Red team 5 N2's diagnosis: a pre-flight step's NCCL log (sockets from its second node's task, InfiniBand from
    its first) read with the running step's layout failed the first node for sockets. Its lines now name no node,
    and the probes found no process of theirs: no node's network is judged from them, nothing is nominated, and a
    note says so."""
    lines = [(None, line) for name in ("ib-roce-dgxh100.log", "socket-ib-disabled-azureml.log")
             for line in (DATA / "nccl-debug" / name).read_text().splitlines()]
    req = DiagnoseRequest("J", "run", expected_hcas=8, ras=False, stacks=False, flight=False)
    answers = [(node, NodeProbe(host=node, read_at=1.0)) for node in ("n1", "n2")]
    diag = judge(req, "slurm", Placement(["n1", "n2"]), [ProbeOutput("n1"), ProbeOutput("n2")], answers,
                 JobOutput(lines))
    assert diag.transport == [] and diag.suspects == []
    nccl = sum(1 for _, line in lines if "NCCL" in line)
    assert f"NCCL network: {nccl:,} NCCL line(s) not judged: no node of the job places them" in "\n".join(diag.notes)
