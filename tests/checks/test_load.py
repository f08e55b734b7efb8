"""The sustained-load judges on their own: figures as a measurer returns them, judged against the recorded nodes'
baselines (gpu-fryer's spread rule, results of the same input, clock event reasons under load)."""

from __future__ import annotations

from gpuval.baselines import load_baseline
from gpuval.checks.load import clock_findings, heat_power_findings, load_dtype, load_findings
from gpuval.checks.measured import GpuRef, LoadFigure
from gpuval.results.model import Status

H100 = load_baseline("Standard_ND96isr_H100_v5")


def _fig(index: int, tflops: float = 730.0, checksum: str = "aa", **more) -> LoadFigure:
    return LoadFigure(GpuRef(index, f"0000000{index}:00:00.0"), tflops, tflops, 20, checksum=checksum, **more)


def test_a_gpu_whose_result_differs_from_the_others_warns_and_one_differing_from_itself_fails():
    figures = [_fig(i) for i in range(4)] + [_fig(4, checksum="bb"), _fig(5, mismatches=2)]
    found = load_findings(H100, figures, "bf16", "alone")
    assert (Status.WARN, "GPU 4 (00000004:00:00.0) alone: its result differs from the other GPUs' for the same "
                         "input (same model and library compute the same bits)") in found
    assert any(s is Status.FAIL and "GPU 5" in r and "2 of 20 results differ" in r for s, r in found)
    assert not [r for _, r in found if "GPU 0" in r]


def test_spread_is_measured_from_the_fastest_gpu_as_gpu_fryer_does():
    figures = [_fig(0, 740.0), _fig(1, 700.0), _fig(2, 660.0)]
    found = dict((r.split(" together")[0], s) for s, r in load_findings(H100, figures, "bf16", "together")
                 if "fastest" in r)
    assert found == {"GPU 1 (00000001:00:00.0)": Status.WARN,  # 5.4% under: gpuval's warn line
                     "GPU 2 (00000002:00:00.0)": Status.FAIL}  # 10.8% under: gpu-fryer's 10%


def test_clock_reasons_under_load():
    figures = [_fig(0, reasons_seen=["software power cap"], sm_mhz_median=1755.0),
               _fig(1, reasons_seen=["hardware thermal slowdown"], sm_mhz_median=1200.0),
               _fig(2, reasons_seen=["application/locked clocks setting"], sm_mhz_median=1980.0)]
    found = clock_findings(figures, "alone", {0: 1980, 1: 1980, 2: 1980})
    assert found == [(Status.FAIL, "GPU 1 (00000001:00:00.0) alone: hardware thermal slowdown under load (SM clock "
                                   "median 1200 MHz)")]  # a locked clock at its maximum holds nothing down


def test_v100_skus_load_in_fp16():
    assert load_dtype(load_baseline("Standard_ND40rs_v2")) == "fp16"
    assert load_dtype(H100) == "bf16"


def test_power_and_heat_under_load_are_judged_per_gpu_against_its_own_limits():
    """DCGM's targeted_power on each GPU, as a burn of the recorded 8 x H100 node judges it: GPU 3 stays at 520 W of
    its 700 W limit while the power cap holds its clocks; GPU 6's HBM reaches 93 C of 95."""
    from tests.health_support import H100 as SKU, context

    ctx = context(SKU)
    for g in ctx.inventory().gpus:
        g.temperature.gpu_slowdown_c, g.temperature.memory_max_c = 87, 95  # an H100 SXM5's limits (NVML)
    figures = [_fig(i, power_w_max=520.0 if i == 3 else 702.0, reasons_seen=["software power cap"],
                    temperature_c_max=70, memory_temperature_c_max=93 if i == 6 else 72) for i in range(8)]
    found = heat_power_findings(ctx, figures, "")
    assert [(s, r.split(":")[0]) for s, r in found] == [(Status.FAIL, "GPU 3 (00000003"),
                                                        (Status.WARN, "GPU 6 (00000006")]
    assert "74.2857 % is under the fail limit 75 %" in found[0][1] and "HBM 93 C under load" in found[1][1]
