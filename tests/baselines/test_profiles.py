"""Node profiles (`--profile FILE`): the node-level expectations a user writes for a node type no packaged SKU
describes, on top of the GPU model found on the node; a bad file is a one-line error and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuval.baselines import find_baseline, load_baseline, packaged_skus
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context, run_suite, select
from gpuval.errors import UsageError
from gpuval.node.recorded import RecordedMachine
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.health_support import no_imds  # noqa: F401

H200_VM = "h200-vm"  # the packaged recording of gpuval's run on one H200 SXM VM, 2026-11-26
NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}
ONE_GPU = {"profile": "h200-vm", "description": "one H200 SXM in a VM",
           "metrics": {"gpu_count": {"unit": "GPUs", "expected": 1, "expected_source": "our VM size: one GPU",
                                     "fail_below": 1, "fail_source": "a missing GPU"}}}


def _write(tmp_path: Path, data: object, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_a_profile_adds_node_level_bands_over_the_gpu_model(tmp_path: Path):
    profile = _write(tmp_path, ONE_GPU)
    machine = RecordedMachine.load(H200_VM)
    ctx = make_context(machine, None, [profile], RecordedMeasurer(machine.measurements, "h200"), repeats=1)
    assert ctx.sku == "h200-vm" and ctx.limits.title == "h200-vm on H200 SXM 141GB"
    assert ctx.limits.band("gemm_sustained_bf16_tflops").expected == 670  # the GPU model's, beneath the profile
    results = {r.name: r for r in run_suite(ctx, select(["gpu_count", "gemm_sustained"])).results}
    assert results["gpu_count"].status is Status.PASS and "our VM size: one GPU" in results["gpu_count"].reason
    assert results["gemm_sustained"].status is Status.PASS


def test_a_profile_wins_over_the_sku_and_inherits_one(tmp_path: Path):
    half = {"profile": "dgx-h100-half", "inherits": "Standard_ND96isr_H100_v5",
            "metrics": {"gpu_count": {"expected": 4, "expected_source": "our 4-GPU partition", "fail_below": 4,
                                      "fail_source": "a missing GPU"}}}
    base = find_baseline("Standard_ND96asr_v4", [_write(tmp_path, half)])
    assert base.sku == "dgx-h100-half" and base.band("gpu_count").expected == 4
    assert base.band("ib_hcas").expected == 8 and base.band("allreduce_busbw_gbps").expected == 460  # inherited
    assert base.gpu.model.key == "h100_sxm5"  # the GPU model its SKU names, until the node's own GPUs say


@pytest.mark.parametrize("content, words", [
    ({**ONE_GPU, "metrics": {"gpu_count": {"expected": 1}}}, "metric gpu_count: expected 1 has no expected_source"),
    ({**ONE_GPU, "sku_typo": 1}, "unknown key(s) sku_typo"),
    ({**ONE_GPU, "gpu": "h300"}, "gpu 'h300' is no packaged GPU model"),
    ({**ONE_GPU, "inherits": "Standard_NX"}, "inherits 'Standard_NX', which has no baseline"),
    ({**ONE_GPU, "profile": ""}, "'profile' names the node type"),
    ({**ONE_GPU, "metrics": {"gpu_count": 1}}, "metric gpu_count must be a mapping"),
    ("profile: [unclosed", "not valid YAML"),
    ("- a list", "a baseline file is a mapping"),
])
def test_a_bad_profile_is_one_line(tmp_path: Path, content: object, words: str):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        find_baseline(None, [_write(tmp_path, content)])


def test_two_profiles_are_refused(tmp_path: Path):
    with pytest.raises(UsageError, match="one --profile at a time"):
        find_baseline(None, [_write(tmp_path, ONE_GPU, "a.yaml"), _write(tmp_path, {**ONE_GPU, "profile": "b"},
                                                                           "b.yaml")])


def test_health_with_a_profile_and_with_a_bad_one(tmp_path: Path):
    """As a user runs it: the H200 VM of the real run with its profile passes; a profile whose figure has no
    source is refused before anything runs: one line, exit 2, no traceback."""
    good = _write(tmp_path, ONE_GPU)
    checks = ["--check", "gpu_count", "--check", "hbm_bandwidth", "--check", "gemm_sustained"]
    proc = run_gpuval("health", "--recorded", H200_VM, "--profile", str(good), "--json", *checks, env=NO_IMDS)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {n: r["status"] for n, r in rows.items()} == {"gpu_count": "pass", "hbm_bandwidth": "pass",
                                                         "gemm_sustained": "pass"}
    assert rows["gemm_sustained"]["data"]["expected"] == 670
    bad = _write(tmp_path, {**ONE_GPU, "metrics": {"gpu_count": {"expected": 1, "fail_below": 1}}}, "bad.yaml")
    proc = run_gpuval("health", "--recorded", H200_VM, "--profile", str(bad), *checks, env=NO_IMDS)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "expected 1 has no expected_source" in lines[0] and "Traceback" not in proc.stderr


def test_the_documented_profile_loads_and_every_model_is_documented():
    doc = (Path(__file__).parents[2] / "docs" / "baselines.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(example)
    from gpuval.baselines import check_profile, gpu_models

    check_profile(data, "docs/baselines.md")
    assert data["profile"] == "p5.48xlarge"
    for model in gpu_models():  # each model's bands, and what is not judged and why
        assert f"`gpus/{model.key}.yaml`" in doc, model.key
        section = doc.split(f"(`gpus/{model.key}.yaml`)", 1)[1].split("\n### ", 1)[0]
        for metric in (*model.metrics, *model.left_out):
            assert f"| {metric} |" in section, (model.key, metric)
    for sku in packaged_skus():
        section = doc.split(f"### {sku} (", 1)[1].split("\n### ", 1)[0]
        base = load_baseline(sku)
        for metric in (*base.layers[-1][1]["metrics"], *base.raw.get("left_out", {})):
            assert f"| {metric}" in section, (sku, metric)


@pytest.mark.parametrize("command", [
    ["report", "--json"], ["import", "log.txt"], ["submit", "health", "--on", "local", "--dry-run"],
    ["fleet", "check", "--on", "local", "--nodes", "1", "--dry-run"], ["burn", "--recorded", H200_VM],
    ["validate", "--json"],
])
def test_every_command_that_judges_reads_the_profile_first(tmp_path: Path, command: list[str]):
    """report, import, submit and fleet check took no --baseline / --profile: they judged by the packaged files
    only. Each command reads and checks the files before it does anything (a bad one: one line, exit 2)."""
    bad = _write(tmp_path, {**ONE_GPU, "metrics": {"gpu_count": {"expected": 1, "fail_below": float("nan"),
                                                                 "expected_source": "a", "fail_source": "b"}}})
    proc = run_gpuval(*command, "--profile", str(bad), env={**NO_IMDS, "GPUVAL_DB": str(tmp_path / "r.db")},
                      cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "is not a finite number" in lines[0], proc.stderr


def test_submit_and_fleet_check_send_the_profile_to_the_nodes(tmp_path: Path):
    good = _write(tmp_path, ONE_GPU)
    submit = run_gpuval("submit", "health", "--on", "local", "--dry-run", "--profile", str(good), env=NO_IMDS)
    assert submit.returncode == 0 and f"--baseline {good}" in submit.stdout, submit.stderr
    fleet = run_gpuval("fleet", "check", "--on", "local", "--nodes", "1", "--dry-run", "--profile", str(good),
                       env=NO_IMDS)
    assert fleet.returncode == 0 and f"--baseline {good}" in fleet.stdout, fleet.stderr
