"""`gpuval baseline learn`'s rule on a recorded fleet (tests/helpers/learn_records.py: the real `gpuval health
--recorded Standard_ND96asr_v4` run copied per node with 0.5% noise): the population, the bad nodes left out and
named, the bands, the bad figures, the drift. The command line's own tests: tests/cli/test_baseline.py."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest

from benchmarks.learn_fleet import T0
from benchmarks.synthetic_fleet import node_record, sweep_rows
from gpuval.baselines.learn import Choice, learn, why_bad
from gpuval.baselines.learn_file import Previous, drift
from gpuval.baselines.learn_read import UNREAD_FLEET
from gpuval.errors import UsageError
from gpuval.results.model import Result, Status, Where
from tests.helpers.learn_records import edit, fleet, reading

FP16 = 275.0  # the recorded ND96asr_v4's fp16 GEMM per GPU (superbench v0.4.0)


def _bands(learned):
    return {f.measure.metric: f for f in learned.figures}


def test_sixteen_healthy_nodes_learn_every_recorded_figure_by_its_method():
    learned = learn(reading(fleet(16)), Choice())
    bands = _bands(learned)
    assert (learned.population.sku, learned.population.gpu, learned.population.driver, learned.population.power) == \
        ("Standard_ND96asr_v4", "NVIDIA A100-SXM4-40GB", "470", "400 W")
    assert len(learned.nodes) == 16 and learned.gpus == 128 and len(learned.runs) == 16 and not learned.excluded
    gemm = bands["gemm_fp16_tflops"]
    assert gemm.method == "gemm_burst" and gemm.noise.n == 128 and gemm.per == "GPU"
    assert abs(gemm.noise.center - FP16) < 1.0
    # 0.5% noise: 3.5 robust sigmas (~1.8%) are under the 5% floor, so the lines are 5% and 10% under the median
    assert gemm.warn_below == pytest.approx(0.95 * gemm.noise.center) and \
        gemm.fail_below == pytest.approx(0.90 * gemm.noise.center)
    allreduce = bands["allreduce_busbw_gbps"]
    assert (allreduce.method, allreduce.measure.size_bytes, allreduce.measure.ranks, allreduce.per) == \
        ("nccl_allreduce", 8 * 1024**3, 8, "node")
    assert bands["gemm_sustained_bf16_tflops"].noise.n == 256  # each GPU alone and with all loaded
    assert {m: bands[m].method for m in ("h2d_gbps", "d2h_gbps", "hbm_memcpy_gbps")} == \
        {"h2d_gbps": "host_copy_ce", "d2h_gbps": "host_copy_ce", "hbm_memcpy_gbps": "hbm_memcpy"}
    assert learned.left_out["hbm_triad_gbps"] == "not measured in these records"
    assert "no method" in learned.left_out["p2p_write_gbps"]


def test_two_bad_nodes_among_sixteen_are_left_out_named_and_not_learned():
    """n004's GPUs all run 20% slow; n011 has one GPU whose memory copies at 88%: both named with the figure that
    put them out, and the bands are the 14 healthy nodes' (what the same 14 learn alone)."""
    lines = fleet(16, {3: 0.8})

    def one_slow_gpu(record):
        record["data"]["details"]["gpus"][5]["memcpy"] *= 0.88
    lines = edit(lines, "n011", "hbm_bandwidth", one_slow_gpu)
    learned = learn(reading(lines), Choice())
    assert sorted(learned.excluded) == ["n004", "n011"]
    assert "-20." in learned.excluded["n004"] and "from the median" in learned.excluded["n004"]
    assert learned.excluded["n011"].startswith("hbm_memcpy_gbps GPU 5 ") and "-11.6% from" in learned.excluded["n011"]
    assert len(learned.nodes) == 14 and "n004" not in learned.nodes
    healthy = [line for line in fleet(16, {3: 0.8}) if '"n004"' not in line and '"n011"' not in line]
    alone = _bands(learn(reading(healthy), Choice()))
    for metric, band in _bands(learned).items():
        assert band.noise.center == alone[metric].noise.center, metric


def test_figures_that_cannot_be_measurements_are_left_out_and_named():
    """NaN, inf, a negative figure and one over the A100's datasheet peak (312 TFLOPS) far: each named, the rest
    of the node learned."""
    def poison(record):
        rows = record["data"]["details"]["gpus"]
        rows[0]["fp16"], rows[1]["fp16"], rows[2]["fp16"], rows[3]["fp16"] = math.nan, math.inf, -5.0, 990.0
    learned = learn(reading(edit(fleet(16), "n002", "gemm_tflops", poison)), Choice())
    assert learned.dropped == ["n002 GPU 0 gemm_fp16_tflops nan TFLOPS: not a finite number",
                               "n002 GPU 1 gemm_fp16_tflops inf TFLOPS: not a finite number",
                               "n002 GPU 2 gemm_fp16_tflops -5 TFLOPS: zero or negative",
                               "n002 GPU 3 gemm_fp16_tflops 990 TFLOPS: over 1.1 x the datasheet peak 312"]
    assert "n002" in learned.nodes and _bands(learned)["gemm_fp16_tflops"].noise.n == 124
    assert why_bad(300.0, 312.0) == "" and why_bad(7.0, None) == ""


def _driver(record, version="535.183.01"):
    record["data"]["value"] = version


def test_mixed_populations_are_split_or_refused_never_averaged():
    lines = fleet(8) + fleet(8, prefix="m", seed=2)
    for i in range(1, 9):
        lines = edit(lines, f"m{i:03d}", "driver", _driver)
    with pytest.raises(UsageError, match=r"several populations, never averaged: .*driver 470, 400 W \(8 nodes\); "
                                         r".*driver 535, 400 W \(8 nodes\): learn one at a time"):
        learn(reading(lines), Choice())
    learned = learn(reading(lines), Choice(driver="535"))
    assert learned.population.driver == "535" and learned.nodes == [f"m{i:03d}" for i in range(1, 9)]
    # a node of two GPU models belongs to no population: named, not pooled
    mixed = edit(fleet(9), "n009", "gpu_count", lambda r: r["data"]["details"].update(
        models=["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]))
    learned = learn(reading(mixed), Choice())
    assert learned.excluded["n009"].startswith("GPUs of different models") and len(learned.nodes) == 8


def test_too_few_nodes_learn_nothing():
    with pytest.raises(UsageError, match=r"nothing can be learned: at least 8 nodes .* found Standard_ND96asr_v4, "
                                         r"NVIDIA A100-SXM4-40GB, driver 470, 400 W \(7 nodes\)"):
        learn(reading(fleet(7)), Choice())
    with pytest.raises(UsageError, match="nothing can be learned: at least 8 nodes .* found no node"):
        learn(reading([]), Choice())


def test_a_record_read_twice_counts_once_and_a_nodes_newest_run_counts():
    """The same file twice is the same fleet; a node's older run (50% slow, an hour earlier) is left out for its
    newest, and counted."""
    once = learn(reading(fleet(16)), Choice())
    twice = learn(reading(fleet(16) + fleet(16)), Choice())
    assert _bands(twice)["gemm_fp16_tflops"].noise == _bands(once)["gemm_fp16_tflops"].noise
    earlier = fleet(16, {i: 0.5 for i in range(16)}, start=T0 - timedelta(hours=1), seed=9)
    found = reading(earlier + fleet(16))
    # each node's older record of each check with a figure or a fact: gpu_count, driver, power_limit, h2d_d2h,
    # gemm_tflops, hbm_bandwidth, gemm_sustained, nccl_allreduce_node
    assert found.older == 16 * 8
    assert _bands(learn(found, Choice()))["gemm_fp16_tflops"].noise == _bands(once)["gemm_fp16_tflops"].noise


def test_the_drift_says_which_figure_moved_beyond_the_noise():
    before = learn(reading(fleet(16)), Choice())
    old = Previous("old.yaml", "Standard_ND96asr_v4", "NVIDIA A100-SXM4-40GB", "",
                   {f.measure.metric: (f.noise.center, f.noise.sigma, f.noise.n) for f in before.figures})
    same = {d.metric: d for d in drift(old, learn(reading(fleet(16, seed=5)), Choice()))}
    assert not any(d.moved for d in same.values()), [d.words() for d in same.values()]

    def slower(record):  # every GPU's GEMM 3% slower: within the bands, beyond the medians' noise
        for row in record["data"]["details"]["gpus"]:
            row["fp16"] *= 0.97
    lines = fleet(16, seed=5)
    for i in range(1, 17):
        lines = edit(lines, f"n{i:03d}", "gemm_tflops", slower)
    moved = {d.metric: d for d in drift(old, learn(reading(lines), Choice()))}
    assert moved["gemm_fp16_tflops"].moved and moved["gemm_fp16_tflops"].change_pct == pytest.approx(-3, abs=0.3)
    assert not moved["hbm_memcpy_gbps"].moved


def _bench(run: str, hosts: list[str], busbw: float, rng: random.Random, at) -> Result:
    """A `gpuval bench` all_reduce over these nodes (one rank per GPU)."""
    record = node_record(run, hosts[0], busbw, rng, at)
    return Result(**{**record.model_dump(), "where": Where(hostname=hosts[0], sku=record.where.sku, ranks=8 * len(
        hosts)), "data": {"results": sweep_rows(busbw, rng, 8 * len(hosts)), "hosts": hosts}, "status": Status.PASS})


def test_multi_node_all_reduce_runs_learn_a_band_of_their_node_count():
    """Three runs over two of the population's nodes (bench records): a 2-node band at the largest size, one
    figure per run; a run over a node left out is not learned from."""
    found = reading(fleet(16, {3: 0.8}))
    rng = random.Random(3)
    for i, busbw in enumerate((188.0, 187.0, 189.0, 120.0)):
        hosts = ["n001", "n002"] if i < 3 else ["n004", "n005"]
        found.add(_bench(f"b{i}", hosts, busbw, rng, T0 + timedelta(hours=i)))
    found.add(_bench("b9", ["n007"], 232.0, rng, T0))  # one node alone: its sizes are other measurements
    found.add(Result(run_id="f", kind="fleet", name="test", where=Where(hostname="n001"), status=Status.PASS,
                     data={"role": "test", "samples": {"all_reduce": [180.0]}}))
    found.add(Result(run_id="e", kind="health", name="gemm_tflops", where=Where(hostname="n002"),
                     status=Status.ERROR, data={"details": {"gpus": [{"index": 0, "fp16": 1.0}]}}))
    assert found.unread == {UNREAD_FLEET} and found.could_not_run == {"gemm_tflops": 1}
    learned = learn(found, Choice())
    # its 30 sizes: the 4 smallest read 0.00 GB/s (left out: zero), 26 others, none pooled with the health runs'
    assert learned.dropped == [f"n007 allreduce_busbw_gbps 0 GB/s at {size} over 8 ranks: zero or negative"
                               for size in (8, 16, 32, 64)]
    assert learned.left_out["allreduce_busbw_gbps (other measurements)"] == (
        "26 other sizes or shapes (at 128 over 8 ranks, at 256 over 8 ranks, at 512 over 8 ranks, ...): another "
        "measurement than the 15 nodes' at 8G over 8 ranks, not pooled")
    band = _bands(learned)["allreduce_busbw_2node_gbps"]
    assert (band.measure.nodes, band.measure.ranks, band.measure.size_bytes, band.per) == (2, 16, 4 * 1024**3, "run")
    assert band.noise.n == 3 and 186 < band.noise.center < 190 and band.method == "nccl_allreduce"


def test_nodes_with_no_sku_learn_a_file_for_nodes_with_no_sku_of_their_gpu_model(tmp_path):
    """A DGX or a workstation: records with no SKU learn a file named by the GPU model, which judges a node with no
    SKU and GPUs of that model (matched by PCI id), and refuses any other (check_learned, before any check)."""
    from datetime import datetime, timezone

    from gpuval.baselines import GpuIdentity, check_learned
    from gpuval.baselines.learn_file import document, render

    lines = [line.replace('"sku": "Standard_ND96asr_v4"', '"sku": null') for line in fleet(8)]
    learned = learn(reading(lines), Choice())
    path = tmp_path / "dgx.yaml"
    path.write_text(render(document(learned, datetime.now(timezone.utc), "test", {}, 0)))
    assert path.read_text().count("\nsku: NVIDIA A100-SXM4-40GB (no SKU)\ngpu: a100_sxm4_40gb\n") == 1
    a100 = GpuIdentity("NVIDIA A100-SXM4-40GB", 0x20B0, 0x134F10DE, 400.0)
    check_learned([path], None, [a100] * 8)
    with pytest.raises(UsageError, match="learned from NVIDIA A100-SXM4-40GB GPUs; this node's are H100 SXM5 80GB"):
        check_learned([path], None, [GpuIdentity("NVIDIA H100 80GB HBM3", 0x2330, 0x16C110DE, 700.0)])
    with pytest.raises(UsageError, match=r"learned on NVIDIA A100-SXM4-40GB \(no SKU\) nodes; this node is "
                                         "Standard_ND96asr_v4"):
        check_learned([path], "Standard_ND96asr_v4", [a100])
