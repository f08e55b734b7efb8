"""One GPU is a node too: no all_reduce between GPUs is measured or judged, validate's one-rank sweep is an NCCL
smoke test (it starts, its data is exact), the report draws time and algbw where busbw is 0 by definition, and the
verdict follows the other checks.

The one-GPU machine is the recorded ND96isr_H100_v5 cut to its GPU 0 with no HCA (built here; the verdicts do not
depend on the GPU model); the one-rank sweep is gpuval's own on a real H200 (tests/data/nccl-tests/SOURCE.md)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

import yaml

from gpuval.baselines import find_baseline
from gpuval.cli.render import _sweep_lines
from gpuval.collectives.nccltests_parse import parse_text
from gpuval.node.recorded import recorded_data
from gpuval.report.build import collective_sections, gather, render_markdown
from gpuval.results import Status
from gpuval.results.store import open_store
from gpuval.workloads.base import this_host
from gpuval.workloads.collective.records import collective_record
from gpuval.workloads.health.run import HealthRequest, run_health
from gpuval.workloads.validate import judge_sweep, verdict
from tests.conftest import DATA, run_gpuval
from tests.health_support import H100, no_imds  # noqa: F401

NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}
ONE_GPU = "one GPU: no all_reduce between GPUs"


def one_gpu_machine(tmp_path: Path) -> Path:
    """The recorded H100 node with GPU 0 only, no HCA, no SKU: a one-GPU VM."""
    data = copy.deepcopy(recorded_data(H100))
    data["gpus"], data["ib_ports"], data["sku"] = data["gpus"][:1], [], None
    data.pop("nccl_topology", None)
    data["description"] = "one GPU cut from the recorded ND96isr_H100_v5"
    path = tmp_path / "one-gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def one_rank_table():
    return parse_text((DATA / "nccl-tests" / "h200-1gpu-gpuval-allreduce.txt").read_text())[0]


def test_one_gpu_skips_the_all_reduce_checks_and_passes(tmp_path: Path):
    run = run_health(HealthRequest("run-1gpu", str(one_gpu_machine(tmp_path)), results=tmp_path / "r.jsonl",
                                   repeats=1))
    by_name = {r.name: r for r in run.records}
    node = by_name["nccl_allreduce_node"]
    assert node.status is Status.SKIPPED and node.reason.startswith(ONE_GPU)
    assert by_name["gpu_count"].status is Status.PASS
    assert run.verdict.status is Status.PASS and run.exit_code == 0


def test_a_sku_of_more_gpus_fails_the_count_and_cannot_judge_its_all_reduce_figure(tmp_path: Path):
    proc = run_gpuval("health", "--recorded", str(one_gpu_machine(tmp_path)), "--sku", H100, "--check", "gpu_count",
                      "--check", "nccl_allreduce_node", env=NO_IMDS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL    gpu_count" in proc.stdout and "1 GPUs is under the fail limit 8 GPUs" in proc.stdout
    assert ONE_GPU in proc.stdout
    assert f"the {H100} figure (460 GB/s) is for 8 GPUs: it cannot be judged here" in proc.stdout


def test_validate_on_one_rank_is_an_nccl_smoke_test_never_judged_by_busbw():
    table = one_rank_table()
    assert table.nranks == 1 and table.total_wrong() == 0 and table.rows[-1].best_busbw() == 0.0
    status, line = judge_sweep(table, None)
    assert status is Status.SKIPPED and "smoke test" in line
    status_sku, line_sku = judge_sweep(table, find_baseline(H100))
    assert status_sku is Status.SKIPPED and "(460 GB/s) is for 8 GPUs: it cannot be judged on one" in line_sku
    shown = "\n".join(_sweep_lines(table, status, line))
    assert "on one rank (a smoke test)" in shown and "17.97 us, algbw 59753.00 GB/s at the largest size 1G" in shown
    assert "busbw 0.00" not in shown and "peak busbw" not in shown
    run_records = run_health(HealthRequest("run-v1", H100, results=Path("/dev/null"), repeats=1)).records
    healthy = [r for r in run_records if r.status is not Status.FAIL]
    found = verdict(0, status, healthy, line, ranks=1)
    assert found.status in (Status.PASS, Status.WARN) and found.exit_code == 0
    assert verdict(1, status, healthy, line, ranks=1).status is Status.FAIL  # a wrong element still fails


def test_the_report_draws_algbw_and_time_for_one_rank(tmp_path: Path):
    table = one_rank_table()
    where = this_host(ranks=1, engine="local")
    record = collective_record(table, where, "run-1r", {}, datetime.now(timezone.utc))
    store = open_store(str(tmp_path / "r.db"))
    store.add([record])
    inp = gather(store, "run-1r", baselines=lambda sku: find_baseline(H100))
    (section,) = collective_sections(inp)
    assert section["figure"] == "algbw" and section["baselines"] == [] and section["title"] == "all_reduce, 1 rank"
    assert section["time_us"] is not None and section["median"] > 50000
    assert "algorithm bandwidth (one rank: busbw is 0 by definition)" in section["chart"]
    page = render_markdown(inp)
    assert "median algbw" in page and "median busbw" not in page


def test_the_recorded_one_gpu_h200_vm_passes_with_the_all_reduce_skipped(tmp_path: Path):
    """The real 1 x H200 VM (recording h200-vm): validate said ERROR "all_reduce at 1G measured nothing"; now the
    all_reduce check is skipped with the reason and the node verdict follows the other checks."""
    run = run_health(HealthRequest("run-h200", "h200-vm", results=tmp_path / "r.jsonl", repeats=1))
    node = next(r for r in run.records if r.name == "nccl_allreduce_node")
    assert node.status is Status.SKIPPED and node.reason.startswith(ONE_GPU)
    assert run.verdict.status is Status.PASS and run.exit_code == 0
