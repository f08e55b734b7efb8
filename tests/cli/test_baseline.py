"""`gpuval baseline learn` through the real command line, and the file it writes judged by `gpuval health`, `gpuval
report` and the exporter as any `--baseline` file is. The fleet: the packaged ND96asr_v4 recording run through
`gpuval health --recorded` and copied per node with 0.5% noise (tests/helpers/learn_records.py); NVML and CUDA
cannot run here, so a recorded machine is the most real stand-in for a node."""

from __future__ import annotations

import json

import yaml

from gpuval.baselines import baseline_source
from gpuval.node.recorded import recorded_data
from tests.conftest import run_gpuval
from tests.helpers.learn_records import A100, NO_IMDS, edit, fleet, write

FIRST = "learned by gpuval baseline learn from 16 nodes, 16 runs "


def _learn(*args: str):
    return run_gpuval("baseline", "learn", *args, env=NO_IMDS)


def _health(recording: str, learned, *args: str):
    return run_gpuval("health", "--recorded", recording, "--baseline", str(learned), *args, env=NO_IMDS)


def _slow(tmp_path, factor: float = 0.8):
    """The recorded ND96asr_v4 with every GPU's GEMM (burst and sustained) at `factor`."""
    data = recorded_data(A100)
    for key in ("gemm_fp16_tflops", "gemm_sustained_bf16_tflops"):
        data["measurements"][key] *= factor
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_learned_from_16_nodes_a_node_20_pct_slow_fails_gemm_and_a_healthy_one_passes(tmp_path):
    """The issue's case, end to end: with no band of gpuval's own on an A100, a node whose eight GPUs all run 20%
    slow passed (its peers are as slow, the floor is 50% of the peak); the fleet's learned band fails it, and the
    healthy recorded node passes. The report and the exporter show the verdict as health gave it."""
    learned = tmp_path / "learned.yaml"
    proc = _learn(str(write(tmp_path / "fleet.jsonl", fleet(16))), "--output", str(learned))
    assert proc.returncode == 0, proc.stderr
    assert "16 nodes (128 GPUs) of Standard_ND96asr_v4, NVIDIA A100-SXM4-40GB, driver 470, 400 W" in proc.stdout
    data = yaml.safe_load(learned.read_text())
    band = data["metrics"]["gemm_fp16_tflops"]
    assert (data["sku"], data["gpu"], band["kind"], band["method"]) == (A100, "a100_sxm4_40gb", "gpuval", "gemm_burst")
    assert band["expected_source"].startswith(FIRST) and band["expected_source"].endswith("the median of 128 GPU "
                                                                                          "figures")
    # THE all_reduce band validate, the report and the fleet's expectation ask: the learned one, at its size
    one_node = baseline_source([learned])(A100).allreduce_band(1, 8)
    assert (one_node.kind, one_node.size_bytes, one_node.expected) == \
        ("gpuval", 8 * 1024**3, data["metrics"]["allreduce_busbw_gbps"]["expected"])
    healthy = _health(A100, learned, "--json")
    assert healthy.returncode == 0, healthy.stdout[-3000:]
    rows = {r["name"]: r for r in json.loads(healthy.stdout)}
    assert rows["gemm_tflops"]["data"]["details"]["judged_by"] == {"band": "pass", "floor": "pass", "peers": "pass"}
    results = tmp_path / "slow.jsonl"
    slow = _health(str(_slow(tmp_path)), learned, "--json", "--results", str(results))
    assert slow.returncode == 1, slow.stdout[-3000:]
    rows = {r["name"]: r for r in json.loads(slow.stdout)}
    gemm = rows["gemm_tflops"]
    assert gemm["status"] == "fail" and gemm["data"]["details"]["judged_by"] == \
        {"band": "fail", "floor": "pass", "peers": "pass"}
    assert gemm["reason"].startswith(f"GPU 0 (00000001:00:00.0) fp16: 220 TFLOPS is under the fail limit "
                                     f"{band['fail_below']:g} TFLOPS ({FIRST}")
    assert rows["gemm_sustained"]["status"] == "fail"
    report = run_gpuval("report", "--baseline", str(learned), "--md", str(tmp_path / "r.md"), "-o",
                        str(tmp_path / "r.html"), env=NO_IMDS)
    assert report.returncode == 1 and "health gemm_tflops fail: GPU 0" in (tmp_path / "r.md").read_text()
    metrics = run_gpuval("exporter", "--once", "--results", str(results)).stdout
    assert 'gpuval_check_status{check="gemm_tflops",host="vm",kind="health",sku="Standard_ND96asr_v4",' \
           'status="fail"} 1.0' in metrics


def test_learning_again_names_the_bad_nodes_and_shows_the_drift(tmp_path):
    """Learned again into the same file from a fleet whose GEMM reads 3% lower, two nodes of it 20% and 30% slow:
    the two are left out and named, and the GEMM median moved beyond the noise while HBM did not."""
    learned = tmp_path / "learned.yaml"
    assert _learn(str(write(tmp_path / "a.jsonl", fleet(16))), "-o", str(learned)).returncode == 0
    lines = fleet(16, {3: 0.8, 9: 0.7}, seed=4)

    def slower(record):
        for row in record["data"]["details"]["gpus"]:
            row["fp16"] *= 0.97
    for i in range(1, 17):
        lines = edit(lines, f"n{i:03d}", "gemm_tflops", slower)
    proc = _learn(str(write(tmp_path / "b.jsonl", lines)), "-o", str(learned))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "left out n004: " in out and "-20." in out.split("left out n004: ")[1][:120]
    assert "left out n010: " in out and "-30." in out.split("left out n010: ")[1][:120]
    assert f"drift from {learned}:" in out
    gemm = out.split("drift from")[1].split("gemm_fp16_tflops ")[1][:90]
    assert gemm.startswith("275.") and "TFLOPS (-3." in gemm and "%): moved beyond the noise (z " in gemm
    assert "hbm_memcpy_gbps" in out.split("drift from")[1] and \
        "within the noise" in out.split("hbm_memcpy_gbps")[-1][:80]
    data = yaml.safe_load(learned.read_text())
    assert data["learned"]["nodes"] == 14 and sorted(data["learned"]["excluded"]) == ["n004", "n010"]
    assert data["learned"]["drift"]["gemm_fp16_tflops"]["verdict"].startswith("moved beyond the noise")


def test_bad_input_is_one_line_exit_2_and_nothing_is_written_half(tmp_path):
    """Too few nodes, two populations, no such results file, records of another SKU for a file learned before, a
    file there gpuval did not learn: one line on stderr, exit 2, the file at --output as it was. A learned A100 file
    on an H100 node (its own SKU, or told the A100's): one line, exit 2, nothing judged."""
    learned = tmp_path / "learned.yaml"
    ok = _learn(str(write(tmp_path / "ok.jsonl", fleet(8))), "-o", str(learned), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["learned"]["nodes"] == 8
    before = learned.read_bytes()
    few = _learn(str(write(tmp_path / "few.jsonl", fleet(7))), "-o", str(learned))
    assert few.returncode == 2 and few.stderr.startswith("error: nothing can be learned: at least 8 nodes")
    lines = fleet(8) + fleet(8, prefix="m", seed=2)
    for i in range(1, 9):
        lines = edit(lines, f"m{i:03d}", "driver", lambda r: r["data"].update(value="535.183.01"))
    mixed = _learn(str(write(tmp_path / "mixed.jsonl", lines)), "-o", str(learned))
    assert mixed.returncode == 2 and "several populations, never averaged" in mixed.stderr
    missing = _learn(str(tmp_path / "none.jsonl"), "-o", str(learned))
    assert missing.returncode == 2 and "none.jsonl: cannot read (no such file)" in missing.stderr
    other = [line.replace(A100, "Standard_ND96amsr_A100_v4") for line in fleet(8)]
    replaced = _learn(str(write(tmp_path / "other.jsonl", other)), "-o", str(learned))
    assert replaced.returncode == 2 and replaced.stderr.startswith(
        f"error: {learned}: learned from {A100}, NVIDIA A100-SXM4-40GB; these records are Standard_ND96amsr_A100_v4, "
        "NVIDIA A100-SXM4-40GB: not overwritten")
    for proc in (few, mixed, missing, replaced):
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert learned.read_bytes() == before and [p.name for p in tmp_path.glob(".learned*")] == []
    mine = tmp_path / "mine.yaml"
    mine.write_text("sku: Standard_ND96asr_v4\nmetrics: {}\n")
    refused = _learn(str(tmp_path / "ok.jsonl"), "-o", str(mine))
    assert refused.returncode == 2 and "is no baseline learned by gpuval baseline learn: not overwritten" in \
        refused.stderr and mine.read_text() == "sku: Standard_ND96asr_v4\nmetrics: {}\n"
    h100 = "Standard_ND96isr_H100_v5"
    other_sku = _health(h100, learned, "--check", "gemm_tflops")
    assert other_sku.returncode == 2 and other_sku.stderr.strip() == (
        f"error: {learned}: learned on {A100} nodes; this node is {h100}: a learned baseline judges only the SKU "
        "and GPU model it was learned from")
    other_model = _health(h100, learned, "--sku", A100, "--check", "gemm_tflops")
    assert other_model.returncode == 2 and other_model.stderr.strip() == (
        f"error: {learned}: learned from NVIDIA A100-SXM4-40GB GPUs; this node's are H100 SXM5 80GB: a learned "
        "baseline judges only the GPU model it was learned from")


def test_a_learned_file_in_the_sites_baseline_folder_judges_without_being_named_and_an_open_folder_is_refused(
        tmp_path):
    """The site's baseline folder (GPUVAL_BASELINE_DIR; /etc/gpuval/baselines by default) holds the learned file:
    `gpuval health` on the slow node fails gemm_tflops by it with no --baseline, as a HealthCheckProgram would. A
    folder or a file another account could have written decides nothing: one line, exit 2, nothing judged."""
    site = tmp_path / "site"
    site.mkdir(mode=0o755)
    assert _learn(str(write(tmp_path / "fleet.jsonl", fleet(16))), "--output", str(site / "ndv4.yaml")).returncode == 0
    (site / "ndv4.yaml").chmod(0o644)
    env = {**NO_IMDS, "GPUVAL_BASELINE_DIR": str(site)}
    slow = run_gpuval("health", "--recorded", str(_slow(tmp_path)), "--json", env=env)
    assert slow.returncode == 1, slow.stdout[-2000:]
    assert {r["name"]: r["status"] for r in json.loads(slow.stdout)}["gemm_tflops"] == "fail"
    for target, mode in ((site / "ndv4.yaml", 0o666), (site, 0o777)):
        target.chmod(mode)
        refused = run_gpuval("health", "--recorded", A100, env=env)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "GPUVAL_BASELINE_DIR" in refused.stderr and "writable by" in refused.stderr
        target.chmod(0o644 if target.is_file() else 0o755)
