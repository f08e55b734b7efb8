"""`gpuval validate`'s judgement on GPU-shaped data: the published NDv4 all_reduce table against the packaged
ND96asr_v4 baseline, and the verdict over sweep and checks (the GPU paths cannot run here; the logic can)."""

from __future__ import annotations

import dataclasses

from gpuval.checks.base import CheckResult
from gpuval.checks.suite import ORDER
from gpuval.baselines import ALLREDUCE_CPU_BYTES, ALLREDUCE_DEFAULT_BYTES, allreduce_size, find_baseline
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.results import Status
from gpuval.workloads.validate import judge_sweep, verdict
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
    fields.update(name="ecc", status=status, fault_code="ECC_ERRORS", reason="r", unit="", details={})
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
    assert allreduce_size(NDV4, 1, 8) == 8 * 1024**3
    assert allreduce_size(NDV4, 1, 4) == ALLREDUCE_DEFAULT_BYTES  # 4 of 8 GPUs: no band, nothing to stop at
    assert allreduce_size(None, 1, 0, on_gpus=False) == ALLREDUCE_CPU_BYTES


def test_a_band_without_a_size_is_judged_at_the_default_size():
    """A user's band naming no size is judged where every path measures it (health's 1 GiB default), not "at 0B"."""
    from gpuval.baselines import Band, Baseline

    mine = Baseline("mine", bands={"gpu_count": Band("gpu_count", expected=8),
                                   "allreduce_busbw_gbps": Band("allreduce_busbw_gbps", "GB/s", 200, "ours",
                                                                fail_below=190, fail_source="ours")})
    status, line = judge_sweep(ndv4_table(), mine)
    assert status is Status.PASS and line.startswith("all_reduce at 1G"), line


def test_a_sweep_over_fewer_ranks_than_the_skus_gpus_is_not_judged_by_its_band():
    """validate judged a 4-rank sweep against the 8-GPU figure (its busbw is another measurement: fewer GPUs share
    the NVSwitch traffic); THE all_reduce rule gives it no band."""
    table = ndv4_table(scale=0.8)
    table.nranks = 4
    status, line = judge_sweep(table, NDV4)
    assert status is Status.SKIPPED and "is for one rank per GPU of 8 GPUs" in line and "4 ranks" in line


def records(*statuses: Status):
    from datetime import datetime, timezone

    from gpuval.results import Where
    from gpuval.workloads.health.records import health_record

    where, now = Where(hostname="node-a"), datetime.now(timezone.utc)
    return [health_record(check(s), where, "run-v", now) for s in statuses]


def test_verdicts():
    """One vocabulary: validate's verdict is THE node verdict over the health records and the sweep's record; what
    was "incomplete" is ERROR with its reason."""
    assert verdict(3, Status.SKIPPED, []).status is Status.FAIL  # wrong elements
    assert verdict(0, Status.FAIL, records(Status.PASS)).status is Status.FAIL
    found = verdict(0, Status.PASS, records(Status.ERROR))
    assert found.status is Status.ERROR and "could not run" in found.reason and found.exit_code == 2
    found = verdict(0, Status.SKIPPED, records(Status.SKIPPED))
    assert found.status is Status.PASS and "only the collective's data was checked" in found.reason
    found = verdict(0, Status.PASS, records(Status.PASS, Status.WARN))
    assert found.status is Status.WARN and found.exit_code == 0
    assert found.reason == "3 judged, within their bands (warnings: ecc)"
    assert verdict(0, Status.PASS, records(Status.PASS), ranks_exit=1).status is Status.FAIL  # NCCL_TESTS_MIN_BW
    assert verdict(0, Status.PASS, records(Status.PASS), ranks_exit=3).status is Status.ERROR


def test_one_rank_is_an_nccl_smoke_test_never_judged_by_busbw():
    """One GPU: busbw is 0 by definition; the sweep is judged on its data only, whatever the baseline says."""
    table = ndv4_table()
    table.nranks = 1
    for row in table.rows:
        for side in row.sides():
            side.bus_bw = 0.0
    status, line = judge_sweep(table, NDV4)
    assert status is Status.SKIPPED and "smoke test" in line and "is for 8 GPUs: it cannot be judged" in line
    status, line = judge_sweep(table, None)
    assert status is Status.SKIPPED and "busbw is 0 by definition" in line
    found = verdict(0, status, records(Status.PASS, Status.SKIPPED), line, ranks=1)
    assert found.status is Status.PASS and found.exit_code == 0
    found = verdict(0, status, records(Status.SKIPPED), line, ranks=1)
    assert found.status is Status.PASS and "smoke test" in found.reason
    assert verdict(2, status, records(Status.PASS), line, ranks=1).status is Status.FAIL


def test_run_validate_returns_a_typed_outcome(tmp_path):
    """The pipeline as the CLI calls it, on this machine (2 gloo ranks, no GPU): health, sweep, verdict, report."""
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
    """The exit contract follows the verdict; the ranks' own exit 1 (NCCL_TESTS_MIN_BW missed) is a FAIL in it."""
    from gpuval.results.verdict import NodeVerdict
    from gpuval.workloads.validate import SweepOutcome, ValidateOutcome

    sweep = SweepOutcome(ndv4_table(), Status.PASS, "", exit_code=1)  # NCCL_TESTS_MIN_BW missed
    for status, code in ((Status.FAIL, 1), (Status.ERROR, 2), (Status.PASS, 0), (Status.WARN, 0), (Status.SKIPPED, 2)):
        outcome = ValidateOutcome("r", NodeVerdict(status, ""), health=None, sweep=sweep)  # type: ignore[arg-type]
        assert outcome.exit_code == code
    missed = verdict(0, sweep.status, records(Status.PASS), sweep.reason, ranks_exit=sweep.exit_code)
    assert ValidateOutcome("r", missed, health=None, sweep=sweep).exit_code == 1  # type: ignore[arg-type]
