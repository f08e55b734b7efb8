"""Each node against the fleet (fleet/plan/node_figures.py): the node suite's GPU figures compared across the nodes of
one GPU model, with THE robust rule; an outlier node is re-run, then convicted (GPUS_SLOW, FLEET_NODE_SLOW_GPU) with
the figure, how far under the fleet's median and its slow GPUs named.

The health records are real: a health run (in this process, as the node test runs it) on the packaged recording of
Standard_ND96asr_v4 (8 x A100 SXM4 40GB), and on the same recording with every GPU's GEMM, HBM and sustained figures
at 75% (each still over its floor and equal to its siblings, so the node's own suite passes it: only the fleet can
see it), or at 120 TFLOPS GEMM (under the A100's floor: the health suite fails it). Their figures are read as the
driver reads them (fleet/run/figures.py) and the rounds are the planner's own; the busbw figures are the same on
every node (nothing else to find). The real-Slurm test is test_node_figures_slurm.py."""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Callable

import pytest
import yaml

from gpuval.fleet.act.drains import with_shared_faults
from gpuval.fleet.plan import Cause, FleetVerdicts, TestResult, new_fleet, plan_next, take_round, verdicts
from gpuval.fleet.plan.terms import Measured, NodeFigures
from gpuval.fleet.run.figures import node_figures
from gpuval.fleet.run.lines import JobEnd, RoundReader, line, suite_verdict
from gpuval.fleet.run.outcome import fault_codes
from gpuval.fleet.plan.terms import Round, Test
from gpuval.engines.spec import JobState, JobStatus
from gpuval.node.recorded import recorded_data
from gpuval.operate.brake import parse_cap
from gpuval.results.model import Result, Status
from gpuval.results.verdict import fault_codes as record_codes

A100 = "NVIDIA A100-SXM4-40GB"
BUSBW = {"node": {"all_reduce": 200.0}, "pair": {"all_reduce": 100.0, "sendrecv": 40.0}, "group": {"all_reduce": 99.0}}
SCALED = ("gemm_fp16_tflops", "hbm_memcpy_gbps", "gemm_sustained_bf16_tflops")
Figures = Callable[[str, int], "NodeFigures | None"]  # (node, its n-th node suite) -> its figures


def _health(tmp_path: Path, name: str, change: Callable[[dict], None] | None = None) -> list[Result]:
    """A real health run on the ND96asr_v4 recording, changed by `change`: its records."""
    from gpuval.workloads.health.run import HealthRequest, run_health

    data = copy.deepcopy(recorded_data("Standard_ND96asr_v4"))
    if change:
        change(data)
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    return run_health(HealthRequest(name, recorded=str(machine), results=Path(os.devnull), repeats=1)).records


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, list[Result]]:
    """The health records of a healthy node, of one whose GPUs all run at 75%, and of one at 120 TFLOPS."""
    tmp = tmp_path_factory.mktemp("health")

    def scaled(data: dict) -> None:
        for key in SCALED:
            data["measurements"][key] *= 0.75

    def under_floor(data: dict) -> None:
        data["measurements"]["gemm_fp16_tflops"] = 120.0

    return {"healthy": _health(tmp, "healthy"), "slow": _health(tmp, "slow", scaled),
            "floor": _health(tmp, "floor", under_floor)}


def _check(nodes: list[str], figures: Figures, health: Callable[[str], tuple[Status, str]] | None = None
           ) -> tuple[FleetVerdicts, list[Round], dict]:
    """The planner's rounds over `nodes`, every node test with its figures from `figures`; the verdicts, the rounds
    and each node test's evidence by test id."""
    state = new_fleet(nodes)
    suites: dict[str, int] = {}
    rounds = []
    while (rnd := plan_next(state)) is not None:
        results = []
        for t in rnd.tests:
            busbw = {c: (v,) * t.samples for c, v in BUSBW[t.kind].items()}
            if t.kind != "node":
                results.append(TestResult(t.id, busbw))
                continue
            node = t.nodes[0]
            suites[node] = suites.get(node, 0) + 1
            status, reason = health(node) if health else (Status.PASS, "")
            results.append(TestResult(t.id, busbw, health=status, health_reason=reason,
                                      gpus=figures(node, suites[node])))
        take_round(state, rnd, results)
        rounds.append(rnd)
    found = verdicts(state)
    evidence = {e.test.id: e for v in found.nodes.values() for e in v.evidence}
    return found, rounds, evidence


def _gpus(values: dict[str, list[float]], model: str = "simulated GPU") -> NodeFigures:
    return NodeFigures(model, {name: Measured("TFLOPS", tuple((f"GPU {i}", v) for i, v in enumerate(vs)))
                               for name, vs in values.items()})


def test_a_node_whose_gpus_all_run_slow_is_re_run_then_failed_naming_the_figure_the_shortfall_and_its_gpus(runs):
    """Four nodes; f4's eight A100s all compute and copy at 75% (its own suite passes it: its GPUs agree with each
    other and sit over their floor). Round 0 makes it a suspect (GPUS_SLOW evidence), its node suite runs again in
    round 1, and failing again it is convicted: FLEET_NODE_SLOW_GPU, the figure, 25% under the median of the fleet's
    A100 nodes, and each of its GPUs by index and bus id. The other three pass, and nothing else is found."""
    assert suite_verdict(runs["slow"])[0] is Status.PASS  # what the node alone says
    records = {"f1": runs["healthy"], "f2": runs["healthy"], "f3": runs["healthy"], "f4": runs["slow"]}
    found, rounds, evidence = _check(list(records), lambda n, _k: node_figures(records[n]))
    assert [t.nodes for t in rounds[1].tests if t.purpose == "rerun"] == [("f4",)]
    first = evidence["r0-suite-3"]
    assert (first.status, first.cause) == (Status.FAIL, Cause.GPUS_SLOW)
    assert first.figures["gemm_fp16_tflops"] == pytest.approx(206.25)
    v = found.nodes["f4"]
    assert (v.status, v.cause, fault_codes(v, [])) == (Status.FAIL, Cause.GPUS_SLOW, ["FLEET_NODE_SLOW_GPU"])
    assert v.reason.startswith("node suite: GPUs slow: ")
    assert (f"gemm_fp16_tflops 206.2 TFLOPS, 25.0% under the median 275 TFLOPS of 4 {A100} nodes (slow beyond 5.0%: "
            "5% of it); slow: GPU 0 (00000001:00:00.0) 206.2, GPU 1 (00000002:00:00.0) 206.2") in v.reason
    assert "GPU 7 (0000000E:00:00.0) 206.2 (8 of 8)" in v.reason
    assert "hbm_memcpy_gbps 866.7 GB/s, 25.0% under the median 1156 GB/s" in v.reason
    assert "gemm_sustained_bf16_tflops of 10 s 199.4 TFLOPS" in v.reason
    assert "GPU 3 (00000004:00:00.0) alone 199.4" in v.reason  # the sustained load's phases, each named
    assert "h2d_gbps" not in v.reason  # what is not slow is not named
    assert {n: x.status for n, x in found.nodes.items()} == {"f1": Status.PASS, "f2": Status.PASS,
                                                            "f3": Status.PASS, "f4": Status.FAIL}
    assert not found.notes and not found.gpus_not_compared


def test_slow_once_then_fine_warns_and_a_first_run_beyond_the_band_by_noise_passes():
    """n1 ran 30% slow in round 0 and at speed on its re-run: its runs together are still beyond the band, so it
    failed once (WARN). n2 ran 6% under (just past the 5% floor of a tight fleet) and then at speed: together 3%
    under, within: the first run was noise, and it passes."""
    nodes = [f"n{i}" for i in range(6)]
    first = {"n1": 0.70, "n2": 0.94}

    def figures(node: str, run: int) -> NodeFigures:
        speed = first.get(node, 1.0) if run == 1 else 1.0
        return _gpus({"gemm_bf16_tflops": [270.0 * speed] * 8})

    found, rounds, evidence = _check(nodes, figures)
    assert sorted(t.nodes[0] for t in rounds[1].tests if t.purpose == "rerun") == ["n1", "n2"]
    assert (found.nodes["n1"].status, found.nodes["n1"].cause) == (Status.WARN, Cause.FAILED_ONCE)
    assert "node suite failed once, not on re-run: GPUs slow: gemm_bf16_tflops 189 TFLOPS" in found.nodes["n1"].reason
    assert (found.nodes["n2"].status, found.nodes["n2"].cause) == (Status.PASS, Cause.MEASURED)
    assert all(found.nodes[n].status is Status.PASS for n in nodes if n not in first)


def test_nodes_of_different_gpu_models_are_never_compared_and_too_few_of_one_are_said():
    """Four A100 nodes and two H100 nodes whose figures are three times theirs (and one of which is half the other):
    no node is failed; the H100s pass on their network, each verdict saying its GPU figures were not judged against
    the fleet, and a note says so (a re-test of a node held for slow GPUs would not lift them: gpus_not_compared)."""
    models = {"a1": A100, "a2": A100, "a3": A100, "a4": A100, "h1": "NVIDIA H100 80GB HBM3",
              "h2": "NVIDIA H100 80GB HBM3"}
    speed = {"a1": 270.0, "a2": 271.0, "a3": 269.0, "a4": 270.0, "h1": 800.0, "h2": 400.0}
    found, _, _ = _check(list(models), lambda n, _k: _gpus({"gemm_bf16_tflops": [speed[n]] * 8}, models[n]))
    assert {n: v.status for n, v in found.nodes.items()} == dict.fromkeys(models, Status.PASS)
    for node in ("h1", "h2"):
        assert ("GPU figures not judged against the fleet: 2 nodes of NVIDIA H100 80GB HBM3 in the check, and nodes "
                "of different GPU models are never compared (at least 3 of one model are)") in found.nodes[node].reason
    assert "not judged" not in found.nodes["a1"].reason
    assert found.notes == ("GPU figures of 2 nodes (h1, h2) not judged against the fleet: 2 nodes of NVIDIA H100 80GB "
                           "HBM3 in the check, and nodes of different GPU models are never compared (at least 3 of one "
                           "model are)",)
    assert found.gpus_not_compared == {"h1", "h2"}


def test_only_the_gpus_that_are_slow_themselves_are_named():
    """Two GPUs of eight at half speed pull the node 12.5% under the fleet: the node fails, and exactly those two
    GPUs are named."""
    def figures(node: str, _run: int) -> NodeFigures:
        values = [270.0] * 8
        if node == "n3":
            values[2] = values[5] = 135.0
        return _gpus({"gemm_bf16_tflops": values})

    found, _, _ = _check([f"n{i}" for i in range(5)], figures)
    v = found.nodes["n3"]
    assert v.cause is Cause.GPUS_SLOW
    assert "12.5% under the median 270 TFLOPS" in v.reason and "slow: GPU 2 135, GPU 5 135 (2 of 8)" in v.reason


def test_a_fleet_that_spreads_wider_is_judged_by_its_spread_and_says_so():
    """Healthy nodes spread +-3% (robust sigma 3%): a node 5% under (past the floor of a tight fleet) is within
    their spread, not a suspect; one 19% under is beyond 3.5 robust sigmas, and its reason says that is the rule
    that judged it."""
    speeds = [1.0, 0.98, 1.02, 0.99, 1.01, 0.97, 1.03, 0.94, 0.80]
    nodes = [f"n{i}" for i in range(len(speeds))]
    found, rounds, _ = _check(nodes, lambda n, _k: _gpus({"gemm_bf16_tflops": [270.0 * speeds[int(n[1:])]] * 8}))
    assert [t.nodes for t in rounds[1].tests if t.purpose == "rerun"] == [("n8",)]
    assert found.nodes["n7"].status is Status.PASS and found.nodes["n8"].cause is Cause.GPUS_SLOW
    assert "19.2% under the median 267.3 TFLOPS of 9 simulated GPU nodes (slow beyond 10.5%: 3.5 robust sigmas of " \
        "the fleet's nodes, 3.0% each)" in found.nodes["n8"].reason


def test_values_that_are_no_figures_judge_nothing_and_are_nobodys_figure():
    """NaN, inf, negative and impossible values (1e308 TFLOPS, whose sum overflows) are left out of a node's figure
    and never named; a node with no usable value is not judged by that figure (its other figures are), and a fleet of
    such values judges nothing."""
    def figures(node: str, _run: int) -> NodeFigures:
        gemm = [270.0] * 8
        if node == "n1":
            gemm[0], gemm[1], gemm[2], gemm[3] = math.nan, math.inf, -5.0, 1e308  # its four real GPUs are at speed
        if node == "n2":
            gemm = [math.nan] * 4 + [1e308] * 4
        return _gpus({"gemm_bf16_tflops": gemm, "broken": [math.nan] * 8})

    found, _, evidence = _check([f"n{i}" for i in range(4)], figures)
    assert {n: v.status for n, v in found.nodes.items()} == dict.fromkeys(["n0", "n1", "n2", "n3"], Status.PASS)
    assert evidence["r0-suite-1"].figures["gemm_bf16_tflops"] == 270.0
    assert "gemm_bf16_tflops" not in evidence["r0-suite-2"].figures
    assert "GPU figures not judged against the fleet" in found.nodes["n2"].reason
    assert found.gpus_not_compared == {"n2"}


def test_a_shortfall_of_the_whole_fleet_against_a_limit_is_one_finding_and_no_node_is_compared_slow(runs):
    """Every node's A100s compute at 120 TFLOPS, under the A100's floor: each node's health suite fails gemm_tflops
    (GEMM_SLOW), the drain brake's shared fault makes that one finding about what they share (none drained for it),
    and no node is slower than the others."""
    records = runs["floor"]
    nodes = ["f1", "f2", "f3", "f4"]
    status, reason = suite_verdict(records)
    found, _, _ = _check(nodes, lambda n, _k: node_figures(records), health=lambda n: (status, reason))
    assert status is Status.FAIL
    assert {v.cause for v in found.nodes.values()} == {Cause.HEALTH_FAILED}
    codes = {n: fault_codes(v, [c for r in records if r.status is Status.FAIL for c in record_codes(r)])
             for n, v in found.nodes.items()}
    assert set(map(tuple, codes.values())) == {("GEMM_SLOW",)}
    [finding] = with_shared_faults(found, codes, parse_cap("5%", "the test")).groups
    assert (finding.subject, finding.cause) == ("GEMM_SLOW on 4 of 4 nodes", Cause.SHARED_FAULT)


def test_the_reader_takes_a_node_tests_gpu_figures_from_the_health_records_it_printed(runs):
    """The node test's lines (its health records, then its samples) come back as a TestResult with the node's GPU
    figures, by metric and how each was measured, each GPU named by index and bus id; a node test whose records hold
    no figure (a CPU node, a quick suite) has none."""
    test, cpu = Test("r0-suite-0", "node", ("f1",), 2, "suite"), Test("r0-suite-1", "node", ("f2",), 2, "suite")
    reader = RoundReader(Round(0, (test, cpu)))
    lines = [("f1", line("start", round=0, node="f1"))]
    lines += [("f1", line("health", round=0, node="f1", record=r.model_dump(mode="json"))) for r in runs["slow"]]
    lines += [(n, line("samples", round=0, node=n, collective="all_reduce", busbw=[1.0, 1.1], hosts=[n], ranks=2))
              for n in ("f1", "f2")]
    cpu_record = next(r for r in runs["healthy"] if r.name == "driver")
    lines += [("f2", line("start", round=0, node="f2")),
              ("f2", line("health", round=0, node="f2", record=cpu_record.model_dump(mode="json")))]
    reader.feed(lines)
    end = JobEnd(JobStatus(job_id="1", engine="slurm", state=JobState.SUCCEEDED))
    got = reader.result(test, end).gpus
    assert got is not None and got.model == A100
    assert sorted(got.figures) == ["allreduce_busbw_gbps at 8G over 8 ranks", "d2h_gbps",
                                   "gemm_fp16_tflops", "gemm_sustained_bf16_tflops of 10 s", "h2d_gbps",
                                   "hbm_memcpy_gbps"]
    gemm = got.figures["gemm_fp16_tflops"]
    assert gemm.unit == "TFLOPS" and gemm.values[3] == ("GPU 3 (00000004:00:00.0)", 206.25)
    assert reader.result(cpu, end).gpus is None
