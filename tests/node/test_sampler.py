"""The NVML sampler a load runs under (clocks are judged under load, not at idle), against the stand-in
pynvml: samples every period on its own thread, an NVML error on one field is None for that sample, and the summary
names the slowdown reasons seen while the load ran."""

from __future__ import annotations

import time

import pynvml

from gpuval.node.sampler import NvmlSampler
from tests.node.fake_nvml import h100_node, install


def test_samples_each_gpu_while_the_load_runs(monkeypatch):
    fake = install(monkeypatch, h100_node({1: {"reasons": 0x40 | 0x4, "sm_now": 1410},
                                           2: {"errors": {"power": pynvml.NVML_ERROR_UNKNOWN}}}))
    with NvmlSampler([0, 1, 2], period_s=0.02) as sampler:
        time.sleep(0.2)
        fake.gpus[0].sm_now = 1755  # the clock drops part-way through
        time.sleep(0.2)
    first, second, third = sampler.summaries()
    assert first.samples >= 5 and first.sm_mhz_min == 1755 and first.temperature_c_max == 61
    assert first.power_w_max == 650.0 and first.reasons_seen == []
    assert second.sm_mhz_median == 1410
    assert second.reasons_seen == ["software power cap", "hardware thermal slowdown"]
    assert third.power_w_max is None and third.samples == first.samples  # one field failing never stops sampling
    assert not sampler._thread.is_alive()


def test_a_process_that_starts_on_a_gpu_while_the_load_runs_is_kept(monkeypatch):
    """Every few samples the processes are read: one there before the load is not new; one that starts part-way
    (and may end before the load does) is the load's figure shared."""
    fake = install(monkeypatch, h100_node({0: {"processes": [(2**22 + 1, 2**30)]}}))
    with NvmlSampler([0, 1], period_s=0.02) as sampler:
        time.sleep(0.15)
        fake.gpus[1].processes = [(2**22 + 7, 30 * 2**30)]
        time.sleep(0.2)
        fake.gpus[1].processes = []  # gone before the load ends: a read after it would not see it
        time.sleep(0.1)
    first, second = sampler.summaries()
    assert first.appeared == []
    assert [(p.gpu, p.pid, p.used_memory_mib) for p in second.appeared] == [(1, 2**22 + 7, 30720)]


def test_the_hbm_temperature_is_sampled_where_the_gpu_has_a_sensor(monkeypatch):
    """NVML_FI_DEV_MEMORY_TEMP (82): 0 means no HBM sensor, as on the lent H200's probe for boards without one."""
    install(monkeypatch, h100_node({0: {"fields": {82: 66}}, 1: {"fields": {82: 0}}}))
    with NvmlSampler([0, 1, 2], period_s=0.02) as sampler:
        time.sleep(0.1)
    hbm, none, unsupported = sampler.summaries()
    assert hbm.memory_temperature_c_max == 66 and none.memory_temperature_c_max is None
    assert unsupported.memory_temperature_c_max is None
