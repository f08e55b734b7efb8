"""`gpuval tune clocks` against a stand-in pynvml raising NVML's own exceptions (tests/node/fake_nvml.py): locked
clocks set and released, --reset undoing both kinds, and no raw NVMLError from any NVML call."""

from __future__ import annotations

import pynvml
import pytest
from typer.testing import CliRunner

from gpuval.cli import app
from gpuval.errors import GpuvalError
from gpuval.node import tuning
from tests.node.fake_nvml import FakeGpu, FakeNvml, h100_node, install

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def test_lock_holds_sm_and_memory_at_their_maximum(monkeypatch):
    fake = install(monkeypatch, h100_node())
    states = tuning.lock_clocks([0, 5])
    assert fake.calls == [("lock_sm", 0, (1980, 1980)), ("lock_mem", 0, (2619, 2619)),
                          ("lock_sm", 5, (1980, 1980)), ("lock_mem", 5, (2619, 2619))]
    assert [s.index for s in states] == [0, 5] and states[0].sm_default == 1755 and not states[0].notes


def test_a_gpu_without_memory_locked_clocks_gets_a_note_not_an_error(monkeypatch):
    """V100: SetMemoryLockedClocks is NOT_SUPPORTED before Ampere."""
    fake = install(monkeypatch, FakeNvml([FakeGpu("00000001:00:00.0", name="Tesla V100-SXM2-32GB", sm_max=1530,
                                                  mem_max=877, errors={"lock_mem": NOT_SUPPORTED})]))
    [state] = tuning.lock_clocks()
    assert fake.calls == [("lock_sm", 0, (1530, 1530))]
    assert state.notes == ["locking GPU 0's memory clock at 877 MHz: this GPU or driver does not support it"]


def test_unlock_and_reset(monkeypatch):
    fake = install(monkeypatch, h100_node())
    tuning.unlock_clocks([1])
    assert fake.calls == [("unlock_sm", 1, ()), ("unlock_mem", 1, ())]
    fake.calls.clear()
    tuning.reset_clocks([2])
    assert fake.calls == [("reset_app", 2, ()), ("unlock_sm", 2, ()), ("unlock_mem", 2, ())]


def test_reset_on_a_gpu_without_application_clocks_still_releases_locked_ones(monkeypatch):
    fake = install(monkeypatch, h100_node({0: {"errors": {"reset_app": NOT_SUPPORTED}},
                                           1: {"errors": {k: NOT_SUPPORTED for k in ("reset_app", "unlock_sm",
                                                                                   "unlock_mem")}}}))
    [state] = tuning.reset_clocks([0])
    assert fake.calls == [("unlock_sm", 0, ()), ("unlock_mem", 0, ())] and "application clocks" in state.notes[0]
    with pytest.raises(tuning.NotSupported, match="GPU 1 supports neither application nor locked clocks"):
        tuning.reset_clocks([1])


@pytest.mark.parametrize(("change", "call", "error", "message"), [
    # the supported-clock queries once sat outside the guard and gave a traceback
    (tuning.set_max_clocks, "supported_clocks", NOT_SUPPORTED,
     "setting GPU 0 application clocks (supported memory clocks): this GPU or driver does not support it"),
    (tuning.lock_clocks, "lock_sm", pynvml.NVML_ERROR_NO_PERMISSION, "needs root"),
    (tuning.lock_clocks, "handle", pynvml.NVML_ERROR_GPU_IS_LOST, "opening GPU 0 failed: NVML says GPU is lost"),
    (tuning.list_clocks, "name", pynvml.NVML_ERROR_UNKNOWN, "reading GPU 0's name failed: NVML says Unknown Error"),
])
def test_every_nvml_error_is_one_gpuval_error(monkeypatch, change, call, error, message):
    install(monkeypatch, h100_node({0: {"errors": {call: error}}}))
    with pytest.raises(GpuvalError, match=message.replace("(", r"\(").replace(")", r"\)")):
        change([0])


def test_tune_clocks_lock_from_the_command_line(monkeypatch):
    fake = install(monkeypatch, h100_node())
    monkeypatch.setattr("os.geteuid", lambda: 0)
    result = CliRunner().invoke(app, ["tune", "clocks", "--lock", "--gpu", "3"])
    assert result.exit_code == 0, result.output
    assert fake.calls == [("lock_sm", 3, (1980, 1980)), ("lock_mem", 3, (2619, 2619))]
    assert "1755/2619" in result.output  # the default application clocks are shown
    result = CliRunner().invoke(app, ["tune", "clocks", "--lock", "--unlock"])
    assert result.exit_code == 2 and "exactly one of --max, --lock, --unlock, --reset, --list" in result.output
    install(monkeypatch, h100_node({3: {"errors": {"supported_clocks": NOT_SUPPORTED}}}))
    result = CliRunner().invoke(app, ["tune", "clocks", "--max", "--gpu", "3"])
    assert result.exit_code == 2 and "does not support it" in result.output and "Traceback" not in result.output
