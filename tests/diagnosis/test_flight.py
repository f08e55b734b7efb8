"""Where a hung job's ranks part ways, per process group, from their Flight Recorder dumps
(gpuval.diagnosis.flight): real dumps of real gloo hangs recorded here (tests/data/flight-recorder/README.md), the
matching rules of torch's own analyser on its test cases, and NVIDIA's recorded 16-rank NCCL fault injections
against the answers of NVRx's analyser where that data is at hand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuval.diagnosis.flight import FlightAnalysis, analyze_dumps, call_site
from gpuval.node.flight_dump import FrDump, FrEntry, FrFrame, parse_dump

DATA = Path(__file__).resolve().parent.parent / "data" / "flight-recorder"
NVRX = Path(os.environ.get("GPUVAL_SHARED_DATA", "/work/shared/data")) / "flight-recorder" / "nvrx-fr-traces"


def _dumps(folder: Path, prefix: str = "rank_") -> dict[int, FrDump]:
    return {int(p.name[len(prefix):]): parse_dump(p.read_bytes()) for p in folder.iterdir()
            if p.name[len(prefix):].isdigit()}


def test_a_rank_stopped_before_the_pair_groups_collective_is_the_root():
    """4 gloo ranks: rank 1 stopped (in Python) before tp's #4; rank 0 waits in tp #4; ranks 2, 3 went on to the
    world's #4 and wait there for ranks 0 and 1."""
    analysis = analyze_dumps(_dumps(DATA / "gloo-4rank-stop"), 4)
    assert analysis.root_ranks == [1] and analysis.agreeing == ["tp (2)"] and not analysis.stuck
    found = {f.desc: f for f in analysis.findings}
    tp, world = found["tp"], found["default_pg"]
    assert (tp.group, tp.members, tp.members_from, tp.kind, tp.seq, tp.entered, tp.behind, tp.root) == \
        ("1", [0, 1], "dumps", "not entered by all", 4, [0], [1], True)
    assert (tp.op, tp.input_sizes, tp.output_sizes, tp.dtypes) == ("gloo:all_reduce", [[64, 4]], [[64, 4]], ["Float"])
    assert (world.seq, world.entered, world.behind, world.root) == (4, [2, 3], [0, 1], False)
    sites = {s.rank: s for s in world.sites}
    assert sites[0].waiting_in == "tp #4 gloo:all_reduce at tensor_parallel_reduce (flight_hang.py:33)"
    assert sites[1].waiting_in == "" and sites[1].call_site == "data_parallel_reduce (flight_hang.py:37)"
    assert (sites[2].state, sites[2].seq) == ("entered", 4)
    assert tp.why == "tp (1): rank(s) 0 entered collective #4 (gloo:all_reduce); rank(s) 1 did not"


def test_a_desync_names_both_ranks_each_in_the_group_it_skipped():
    """Rank 1 skipped tp's #4 for the world's #4: ranks 0 and 1 wait for each other (a cycle: both roots)."""
    analysis = analyze_dumps(_dumps(DATA / "gloo-4rank-desync"), 4)
    assert analysis.root_ranks == [0, 1]
    assert sorted((f.desc, f.entered, f.behind, f.root) for f in analysis.findings) == \
        [("default_pg", [1, 2, 3], [0], True), ("tp", [0], [1], True)]
    tp = next(f for f in analysis.findings if f.desc == "tp")
    assert tp.sites[1].waiting_in == "default_pg #4 gloo:all_reduce at data_parallel_reduce (flight_hang.py:37)"


def test_torchs_json_form_without_frames_gives_the_same_finding():
    dumps = _dumps(DATA / "gloo-4rank-stop")
    dumps[0] = parse_dump((DATA / "gloo-4rank-stop" / "rank_0.json").read_bytes())
    tp = next(f for f in analyze_dumps(dumps, 4).findings if f.desc == "tp")
    assert (tp.seq, tp.entered, tp.behind, tp.root) == (4, [0], [1], True) and tp.sites[0].call_site == ""


def test_a_probes_compact_dumps_and_missing_ranks_keep_the_finding():
    dumps = _dumps(DATA / "gloo-4rank-stop")
    full = analyze_dumps(dumps, 4)
    compact = analyze_dumps({r: d.compact(keep=2, frames_of=1) for r, d in dumps.items()}, 4)
    assert [(f.desc, f.seq, f.entered, f.behind, f.root) for f in compact.findings] == \
        [(f.desc, f.seq, f.entered, f.behind, f.root) for f in full.findings]
    without_3 = analyze_dumps({r: d for r, d in dumps.items() if r != 3}, 4)
    assert without_3.no_dump == [3]
    world = next(f for f in without_3.findings if f.desc == "default_pg")
    assert (world.entered, world.behind, world.members) == ([2], [0, 1], [0, 1, 2])  # members from the dumps


def test_the_analysis_round_trips_as_json():
    analysis = analyze_dumps(_dumps(DATA / "gloo-4rank-desync"), 4)
    assert FlightAnalysis.model_validate(analysis.to_json()) == analysis


def _entry(seq: int, name: str, inputs, outputs, dtypes=("Float",), out_dtypes=None, state="scheduled",
           record=0) -> FrEntry:
    return FrEntry(record_id=record or seq, pg_id=0, process_group=("0", "default_pg"), collective_seq_id=seq,
                   profiling_name=f"nccl:{name}", input_sizes=inputs, output_sizes=outputs,
                   input_dtypes=list(dtypes), output_dtypes=list(out_dtypes or dtypes), state=state)


def _pair(first: FrEntry, second: FrEntry) -> FlightAnalysis:
    """Two ranks of one NCCL group (pg_config names it) that both ran collective #1."""
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    return analyze_dumps({0: FrDump(version="2.10", pg_config=config, entries=[first]),
                          1: FrDump(version="2.10", pg_config=config, entries=[second])}, 2)


# torch's test_fr_analysis.py, test_match_one_event: the pairs and whether torch matches them
@pytest.mark.parametrize("other, mismatch", [
    (_entry(1, "all_reduce", [[4, 4]], [[4, 4]]), False),
    (_entry(1, "all_gather", [[4, 4]], [[4, 4]]), True),  # COLLECTIVE_TYPE_MISMATCH
    (_entry(1, "all_reduce", [[5, 4]], [[4, 4]]), True),  # SIZE_OR_SYNTAX_MISMATCH (input)
    (_entry(1, "all_reduce", [[4, 4]], [[5, 4]]), True),  # SIZE_OR_SYNTAX_MISMATCH (output)
    (_entry(1, "all_reduce", [[4, 4]], [[4, 4]], out_dtypes=("Half",)), True),  # COLLECTIVE_DTYPE_MISMATCH
])
def test_torchs_matching_cases_for_one_collective(other, mismatch):
    analysis = _pair(_entry(1, "all_reduce", [[4, 4]], [[4, 4]]), other)
    kinds = [(f.kind, f.seq, f.behind) for f in analysis.findings]
    assert kinds == ([("mismatch", 1, [0, 1])] if mismatch else [])  # two ranks: a tie names both


def test_torchs_exceptions_gather_output_and_all_to_all_sizes_may_differ():
    gather = _pair(_entry(1, "gather", [[4, 4]], [[4, 4], [4, 4]]), _entry(1, "gather", [[4, 4]], [[]], out_dtypes=()))
    all_to_all = _pair(_entry(1, "all_to_all", [[4027, 5120]], [[4096, 5120]]),
                       _entry(1, "all_to_all", [[4096, 5120]], [[4099, 5120]]))
    assert gather.findings == [] and all_to_all.findings == []


def test_completion_on_some_members_only_and_a_collective_nobody_finishes():
    done, waiting = _entry(1, "all_reduce", [[8]], [[8]], state="completed"), _entry(1, "all_reduce", [[8]], [[8]])
    (late,) = _pair(done, waiting).findings
    assert (late.kind, late.seq, late.behind) == ("not completed by all", 1, [1])
    nobody = _pair(waiting, waiting)
    assert nobody.findings == [] and [(f.kind, f.behind) for f in nobody.stuck] == [("all waiting", [])]


def test_the_call_site_is_the_programs_own_frame():
    frames = [FrFrame(name="all_reduce", filename="/v/lib/python3.11/site-packages/torch/distributed/c10d.py", line=9),
              FrFrame(name="step", filename="/home/u/train.py", line=44)]
    assert call_site(frames) == "step (train.py:44)" and call_site(frames[:1]) == "all_reduce (c10d.py:9)"
    assert call_site([]) == ""


@pytest.mark.skipif(not NVRX.is_dir(), reason=f"NVRx's recorded dumps are not at {NVRX} (tests/data/flight-recorder/"
                    "README.md)")
@pytest.mark.parametrize("case, roots", [
    ("gpu_error_1st", {("74", "nccl:all_to_all", (12,))}),
    ("gpu_error_2nd", {("72", "nccl:all_to_all", (9, 14))}),
    ("lock_gil_1st", {("72", "nccl:all_to_all", (9, 14))}),
    ("lock_gil_2nd", {("73", "nccl:all_to_all", (10,)), ("74", "nccl:all_to_all", (15,))}),
])
def test_nvrxs_recorded_nccl_faults_name_the_groups_and_ranks_its_analyser_names(case, roots):
    """16 ranks, tensor/pipeline/expert/data parallel groups, faults injected in two ranks (a GPU error, the GIL
    held); the dumps hold only active entries and no frames. The findings marked root are NVRx's reference
    answers (reference.txt beside the dumps): the expert-parallel all_to_all the faulty ranks never entered."""
    analysis = analyze_dumps(_dumps(NVRX / case, "_dump_"), 16)
    assert {(f.group, f.op, tuple(f.behind)) for f in analysis.findings if f.root} == roots
    reference = (NVRX / case / "reference.txt").read_text()
    assert all(f"| {','.join(map(str, ranks))}\n" in reference + "\n" for _, _, ranks in roots)
