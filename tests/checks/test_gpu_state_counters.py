"""The clock event reason counters judged between two runs on this machine: they count from the
driver's load, so a slowdown long past must not warn on every run; what grew since the last check does."""

from __future__ import annotations

from pathlib import Path

from gpuval.checks.base import REGISTRY
from gpuval.node.clock_counters import FILE
from gpuval.node.kernel_log import PassMark
from gpuval.results.model import Status
from tests.health_support import context, gpu, no_imds  # noqa: F401

ZERO = {"sw_power_cap_s": 0.0, "sync_boost_s": 0.0, "sw_thermal_s": 0.0, "hw_thermal_s": 0.0, "hw_power_brake_s": 0.0}


def _run(tmp_path: Path, **counters: float):
    ctx = context("h200-vm", gpu(0, clock_event_counters={**ZERO, **counters}), xid_mark=PassMark(tmp_path / "x"))
    return REGISTRY["clock_throttle"].run(ctx)


def test_what_grew_between_two_runs_warns_and_what_did_not_passes(tmp_path: Path):
    first = _run(tmp_path, hw_thermal_s=12.5, sw_power_cap_s=65.71149)
    assert first.status is Status.WARN and "since the driver loaded by hardware thermal slowdown 12.5 s" in \
        first.reason
    assert (tmp_path / FILE).exists()
    again = _run(tmp_path, hw_thermal_s=12.5, sw_power_cap_s=70.0)
    assert again.status is Status.PASS and "GPU 0 70.0 s" in again.reason  # the power cap: reported
    grew = _run(tmp_path, hw_thermal_s=14.0)
    assert grew.status is Status.WARN and "since the last check here (" in grew.reason
    assert "hardware thermal slowdown 1.5 s" in grew.reason
    reloaded = _run(tmp_path, hw_thermal_s=0.5)  # lower than last time: the driver reloaded
    assert reloaded.status is Status.WARN and "since the driver loaded by hardware thermal slowdown 0.5 s" in \
        reloaded.reason


def test_a_recording_has_no_last_run_and_is_judged_since_the_driver_loaded():
    result = REGISTRY["clock_throttle"].run(context("h200-vm", gpu(0, clock_event_counters={**ZERO,
                                                                                            "hw_power_brake_s": 3.0})))
    assert result.status is Status.WARN
    assert "clocks held since the driver loaded by hardware power brake 3.0 s" in result.reason
