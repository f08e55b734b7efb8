"""A figure of a GPU's state that is no finite number judges nothing: the one place a Gpu is built (NVML's reader and
a recording's alike) keeps such a figure out and says it could not be read, so every check of that field is ERROR
"not a finite figure", never PASS or a mere WARN. Recordings stand in for NVML (no GPU here): the packaged
Standard_ND96isr_H100_v5 recording, one figure changed."""

from __future__ import annotations

import math

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.node.machine import Clocks, Gpu
from gpuval.results.model import Status
from tests.health_support import H100, context, data_set


@pytest.mark.parametrize("check, path, value", [
    ("app_clocks", "gpu_defaults.clocks.sm_application", math.nan),  # was PASS app_clocks (nan/2619 MHz)
    ("app_clocks", "gpu_defaults.clocks.sm_application", math.inf),
    ("app_clocks", "gpu_defaults.clocks.sm_application", -math.inf),
    ("pcie_link", "gpu_defaults.pcie.width_current", math.nan),  # was PASS pcie_link
    ("power_limit", "gpu_defaults.power.enforced_w", -math.inf),  # was WARN
    ("pcie_errors", "gpu_defaults.pcie.replays", math.inf),
    ("ecc", "gpus.3.ecc.volatile_uncorrected", math.nan),
])
def test_a_recorded_state_figure_that_is_no_finite_number_is_error(check: str, path: str, value: float):
    result = REGISTRY[check].run(context(H100, data_set(path, value)))
    assert result.status is Status.ERROR and "not a finite figure" in result.reason, (result.status, result.reason)


def test_the_gpu_keeps_no_non_finite_figure_and_says_which():
    """As NVML's reader builds it: the figure is None (unknown), the field unreadable with the figure named."""
    g = Gpu(index=2, clocks=Clocks(sm_application=math.nan, sm_max=1980), aer={"fatal": {"TOTAL_ERR_FATAL": math.inf}})
    assert g.clocks.sm_application is None and g.clocks.sm_max == 1980
    assert g.unreadable["clocks"] == "clocks.sm_application is nan: not a finite figure, not judged"
    assert "aer.fatal.TOTAL_ERR_FATAL is inf" in g.unreadable["aer"] and g.aer == {"fatal": {"TOTAL_ERR_FATAL": None}}
    assert Gpu(index=0, clocks=Clocks(sm_application=1410)).unreadable == {}
