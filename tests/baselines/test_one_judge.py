"""One figure, one verdict: the ND96asr_v4 all_reduce busbw at 8 GiB judged through every path gpuval has (the
health check, validate's sweep judgement, an imported nccl-tests -J log through the diagnosis and the report, a
fleet check's node test measured without noise among healthy peers) at,
just under and just over each limit of the packaged band (fail 228 GB/s, AzNHC's line; warn 230 GB/s); and a
`--profile` band judged the same by `gpuval health`, validate's report and `gpuval report --profile`.

Once, 227.996 GB/s was WARN in `gpuval health` (rounded to 228.00 first) and FAIL in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval.baselines import baseline_source, load_baseline
from gpuval.checks.base import REGISTRY
from gpuval.collectives.table import Row, Side, Table
from gpuval.fleet.plan import FleetConfig, Test, TestResult
from gpuval.fleet.plan.expect import expectation, message_sizes
from gpuval.fleet.plan.weighing import Basis, Calibration, weigh
from gpuval.report.build import gather, render_markdown
from gpuval.results import Status
from gpuval.results.store import open_store
from gpuval.workloads import ingest
from gpuval.workloads.validate import judge_sweep
from tests.conftest import run_gpuval
from tests.health_support import A100, context, data_set, no_imds  # noqa: F401

SIZE = 8 * 1024**3
CASES = [  # figure, verdict: Band.judge's rule is "under a limit", so a figure at a limit is not under it
    (227.996, Status.FAIL), (228.0, Status.WARN), (228.004, Status.WARN),
    (229.996, Status.WARN), (230.0, Status.PASS), (230.004, Status.PASS),
]


def _row(busbw: float) -> dict:
    """One 8 GiB row whose out-of-place and in-place busbw average `busbw` (nccl-tests' Avg bus bandwidth at one
    size: the figure the health check measures and AzNHC compares, baselines.allreduce_figure)."""
    side = {"time": 64200.0, "alg_bw": busbw * 8 / 14, "bus_bw": busbw + 0.5, "nwrong": 0}
    return {"size": SIZE, "count": SIZE // 4, "type": "float", "redop": "sum", "root": "    -1",
            "out_of_place": side, "in_place": dict(side, bus_bw=busbw - 0.5), "experiment_name": "all_reduce_perf"}


def _health_check(busbw: float) -> Status:
    ctx = context(A100, data_set("measurements.allreduce_busbw_gbps", busbw))
    return REGISTRY["nccl_allreduce_node"].run(ctx).status


def _validate_sweep(busbw: float) -> Status:
    sides = Side(64200.0, busbw * 8 / 14, busbw + 0.5, 0), Side(64200.0, busbw * 8 / 14, busbw - 0.5, 0)
    table = Table("all_reduce", 8, [Row(SIZE, SIZE // 4, "float", "sum", -1, *sides)])
    return judge_sweep(table, load_baseline(A100))[0]


def _import_and_report(busbw: float, tmp_path: Path) -> tuple[Status, Status, str]:
    """`gpuval import --sku Standard_ND96asr_v4` of nccl-tests' -J document, then the report's diagnosis."""
    log = tmp_path / "node-a.json"
    devices = [{"rank": r, "hostname": "node-a", "device": r} for r in range(8)]
    log.write_text(json.dumps({"version": 2, "devices": devices, "results": [_row(busbw)]}))
    found = ingest.import_file(log, ingest.Origin("boundary", sku=A100))
    assert found.error is None and [r.name for r in found.records] == ["all_reduce"]
    store = open_store(str(tmp_path / "r.db"))
    store.add(found.records)
    inp = gather(store, "boundary", baselines=baseline_source())
    (node,) = inp.diagnosis.nodes
    (finding,) = [f for f in node.findings if f.check == "baseline"]
    return finding.status, node.status, render_markdown(inp)


def _fleet_node_test(busbw: float) -> Status:
    """A fleet check's node test on ND96asr_v4 (its in-node all_reduce, 32 identical samples: no noise) beside four
    healthy peers at the expected figure: the fleet's judgement of it through baselines.noisy."""
    base = load_baseline(A100)
    expect = expectation(base, message_sizes(base))
    cfg = FleetConfig(noise_floor=0.0)
    tests = [(Test(f"r0-suite-{i}", "node", (f"node-{i}",), 32, "suite"),
              TestResult(f"r0-suite-{i}", {"all_reduce": (234.0 if i else busbw,) * 32}, health=Status.PASS))
             for i in range(5)]
    cal = Calibration()
    cal.update(tests, {}, expect, cfg)
    test, result = tests[0]
    return weigh(test, result, 0, Basis(cal, cfg, expect=expect)).status


@pytest.mark.parametrize("busbw, expected", CASES)
def test_the_same_figure_gets_the_same_verdict_on_every_path(busbw: float, expected: Status, tmp_path: Path):
    assert load_baseline(A100).judge("allreduce_busbw_gbps", busbw).status is expected
    assert _health_check(busbw) is expected
    assert _validate_sweep(busbw) is expected
    assert _fleet_node_test(busbw) is expected
    finding, node, markdown = _import_and_report(busbw, tmp_path)
    assert finding is expected and node is expected
    assert f"| node-a | {expected.value} |" in markdown


# ---- the GPU model's bands (no SKU): the checks judge each GPU by its own limits, through the same Band.judge --------

H200_VM = "h200-vm"  # the packaged recording of gpuval's run on one H200 SXM VM, 2026-11-26
SUSTAINED = [(569.996, Status.FAIL), (570.0, Status.WARN), (614.996, Status.WARN), (615.0, Status.PASS)]


@pytest.mark.parametrize("tflops, verdict", SUSTAINED)
def test_the_h200_sustained_band_gives_one_verdict_on_every_path(tflops, verdict):
    """gemm_sustained and burn on the recorded H200 VM (no SKU), and the band itself, at each calibrated limit."""
    from gpuval.baselines import GpuIdentity, with_gpus
    from gpuval.checks.load import burn_check
    from gpuval.checks.measure import RecordedMeasurer
    from gpuval.checks.suite import make_context
    from gpuval.node.recorded import RecordedMachine

    machine = RecordedMachine.load(H200_VM)
    machine.measurements.update(gemm_sustained_bf16_tflops=tflops, gemm_sustained_bf16_tflops_all=tflops)
    ctx = make_context(machine, None, (), RecordedMeasurer(machine.measurements, "h200"), repeats=1)
    band = with_gpus(None, [GpuIdentity("NVIDIA H200", 0x2335, 0x18BF10DE, 700.0, 5, 16)]).band(
        "gemm_sustained_bf16_tflops")
    assert band.judge(tflops).status is verdict
    assert REGISTRY["gemm_sustained"].run(ctx).status is verdict
    assert burn_check(20).run(ctx).status is verdict


# ---- a --profile band: one verdict in `gpuval health`, validate's report and `gpuval report` ------------------------

PROFILE = {"profile": "my-ndv4", "inherits": A100,
           "metrics": {"allreduce_busbw_gbps": {
               "unit": "GB/s", "size_bytes": SIZE, "expected": 240, "expected_source": "our acceptance run",
               "warn_below": 236, "warn_source": "our policy", "fail_below": 232, "fail_source": "our line"}}}
PROFILE_CASES = [(231.996, Status.FAIL), (232.0, Status.WARN), (235.996, Status.WARN), (236.0, Status.PASS)]


def _profile_store(busbw: float, tmp_path: Path) -> tuple[Path, Path]:
    """The profile file, and a store holding one node's 8-rank all_reduce at 8 GiB imported under that profile (its
    records name the profile, as a health run with --profile names it)."""
    import yaml

    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    log = tmp_path / "node-a.json"
    devices = [{"rank": r, "hostname": "node-a", "device": r} for r in range(8)]
    log.write_text(json.dumps({"version": 2, "devices": devices, "results": [_row(busbw)]}))
    origin = ingest.Origin("profiled", sku="my-ndv4", baselines=baseline_source([profile]))
    found = ingest.import_file(log, origin)
    db = tmp_path / "r.db"
    open_store(str(db)).add(found.records)
    return profile, db


@pytest.mark.parametrize("busbw, expected", PROFILE_CASES)
def test_a_profile_band_gets_one_verdict_in_health_validate_and_report(busbw: float, expected: Status,
                                                                      tmp_path: Path):
    """`gpuval report` judged a run made with --profile against the packaged files only (it had no --profile):
    the same figure was judged by the profile's band in health and validate, and not at all in the report."""
    from gpuval.workloads.validate import _source

    profile, db = _profile_store(busbw, tmp_path)
    ctx = context(A100, data_set("measurements.allreduce_busbw_gbps", busbw), baselines=[profile])
    assert ctx.sku == "my-ndv4" and REGISTRY["nccl_allreduce_node"].run(ctx).status is expected
    sides = Side(64200.0, 1.0, busbw + 0.5, 0), Side(64200.0, 1.0, busbw - 0.5, 0)
    assert judge_sweep(Table("all_reduce", 8, [Row(SIZE, SIZE // 4, "float", "sum", -1, *sides)]),
                       ctx.baseline)[0] is expected
    (node,) = gather(open_store(str(db)), "profiled", baselines=_source(ctx, baseline_source([profile]))).diagnosis.nodes
    assert node.status is expected
    proc = run_gpuval("report", "--db", str(db), "--run", "profiled", "--profile", str(profile), "--json",
                      "-o", str(tmp_path / "r.html"))
    assert proc.returncode == (1 if expected is Status.FAIL else 0), proc.stderr
    (reported,) = json.loads(proc.stdout)["nodes"]
    assert reported["status"] == expected.value
