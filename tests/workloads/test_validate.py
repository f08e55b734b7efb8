"""`gpuval validate`'s judgement on GPU-shaped data: the published NDv4 all_reduce table against the packaged
ND96asr_v4 baseline, and the verdict over sweep and checks (the GPU paths cannot run here; the logic can)."""

from __future__ import annotations

import dataclasses

from gpuval.checks.base import CheckResult
from gpuval.checks.suite import ORDER
from gpuval.baselines import find_baseline
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.results import Status
from gpuval.workloads.validate import CPU_TOP_BYTES, judge_sweep, sweep_top, verdict
from tests.conftest import DATA

NDV4 = find_baseline("Standard_ND96asr_v4")


def ndv4_table(scale: float = 1.0):
    table = parse_text((DATA / "nccl-tests" / "ndv4-1node-allreduce.txt").read_text())[0]
    for row in table.rows:
        for side in row.sides():
            side.bus_bw *= scale
    return table


def check(status: Status) -> CheckResult:
    fields = {f.name: None for f in dataclasses.fields(CheckResult)}
    fields.update(name="ecc", status=status, fault_code="ECC_ERRORS", reason="r", unit="")
    return CheckResult(**fields)


def test_sweep_is_judged_at_the_baselines_named_size():
    status, line = judge_sweep(ndv4_table(), NDV4)
    assert status is Status.PASS and line.startswith("all_reduce at 8G")
    status, line = judge_sweep(ndv4_table(scale=0.8), NDV4)  # 187 GB/s at 8 GiB on one node: a slow node
    assert status is Status.FAIL and "under the fail limit" in line


def test_a_sweep_that_stops_short_is_not_judged():
    table = ndv4_table()
    table.rows = [r for r in table.rows if r.size <= 1024**3]
    status, line = judge_sweep(table, NDV4)
    assert status is Status.SKIPPED and "stopped at 1G" in line


def test_sweep_size_follows_the_baseline_on_gpus():
    assert sweep_top(NDV4, gpus=8) == 8 * 1024**3
    assert sweep_top(None, gpus=0) == CPU_TOP_BYTES


def test_verdicts():
    """One vocabulary: validate's verdict is a Status; what was "incomplete" is ERROR with its reason."""
    assert verdict(3, Status.SKIPPED, [])[0] is Status.FAIL  # wrong elements
    assert verdict(0, Status.FAIL, [check(Status.PASS)])[0] is Status.FAIL
    word, basis = verdict(0, Status.PASS, [check(Status.ERROR)])
    assert word is Status.ERROR and "could not run" in basis
    word, basis = verdict(0, Status.SKIPPED, [check(Status.SKIPPED)])
    assert word is Status.PASS and "only the collective's data was checked" in basis
    word, basis = verdict(0, Status.PASS, [check(Status.PASS), check(Status.WARN)])
    assert word is Status.PASS and basis == "3 judged figures within their bands (with warnings)"


def test_run_validate_returns_a_typed_outcome(tmp_path):
    """The pipeline as the CLI calls it, on this machine (2 gloo ranks, no GPU): health, sweep, verdict, report."""
    from gpuval.checks.suite import ORDER
    from gpuval.results import read_results
    from gpuval.workloads.validate import run_validate

    told = []
    outcome = run_validate(maxbytes=64 * 1024, results=tmp_path / "r.jsonl", report=tmp_path / "r.html", quiet=True,
                           on_sweep=lambda top, ranks, gpus: told.append((top, ranks, gpus)))
    assert told == [(64 * 1024, 2, 0)]
    assert outcome.status is Status.PASS and outcome.exit_code == 0
    assert "only the collective's data was checked" in outcome.reason
    assert outcome.sweep.status is Status.SKIPPED and outcome.sweep.table.rows[-1].size == 64 * 1024
    assert outcome.report == tmp_path / "r.html" and outcome.report.is_file()
    assert [r.name for r in outcome.health.records] == [r.name for r in outcome.health.suite.results]
    doc = outcome.to_json()
    assert doc["status"] == "pass" and doc["sweep"]["status"] == "skipped" and len(doc["health"]) == len(ORDER)
    assert {r.run_id for r in read_results(tmp_path / "r.jsonl")} == {outcome.run_id}


def test_the_outcome_exit_codes():
    from gpuval.workloads.validate import SweepOutcome, ValidateOutcome

    sweep = SweepOutcome(ndv4_table(), Status.PASS, "", exit_code=1)  # NCCL_TESTS_MIN_BW missed
    for status, code in ((Status.FAIL, 1), (Status.ERROR, 2), (Status.PASS, 1)):
        assert ValidateOutcome("r", status, "", health=None, sweep=sweep).exit_code == code  # type: ignore[arg-type]
    assert ValidateOutcome("r", Status.PASS, "", health=None, sweep=None).exit_code == 0  # type: ignore[arg-type]
