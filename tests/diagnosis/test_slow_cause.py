"""Why a straggler is slow (gpuval.diagnosis.slow_cause), named on its step records: a throttled GPU (step timers
fed a recorded NVML: no GPU here), a GPU slower at full clocks, a contended host and a rank held off its CPU
(records with synthetic /proc figures), and ranks whose GPUs are all power capped or whose host is one and the same
(no label from what they share)."""

from __future__ import annotations

import io
import json
import time

import pytest

from gpuval.diagnosis.slow_cause import slow_cause
from gpuval.diagnosis.straggler import find_stragglers
from gpuval.hooks import StepTimer, read_line
from gpuval.hooks.record import GpuReading, HostLoad, Stats, StepRecord
from tests.conftest import DATA
from tests.node.fake_nvml import FakeGpu, FakeNvml, install

SW_POWER_CAP = 74  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: nanoseconds held, since the driver loaded


def _recorded_power_cap() -> float:
    """The share of the time an H200 under bf16 GEMMs was held by its software power cap: its counter before and
    after 10 s of them (tests/data/nvml/h200-probe-2026-11-26.json, SOURCE.md)."""
    probe = json.loads((DATA / "nvml" / "h200-probe-2026-11-26.json").read_text())
    before, after = ({f[0]: f[3] for f in probe[key]}[SW_POWER_CAP] for key in ("f1", "f2"))
    return (after - before) / 1e9 / 10


class _Clock:
    """time.perf_counter and time.time of a test that steps them itself: what the timers measure is what the test
    says each step took, however loaded the machine (a 10 ms sleep took 30 ms and more in a full run)."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def now(self) -> float:
        return self.t

    def spend(self, seconds: float) -> None:
        self.t += seconds


def test_a_straggler_on_a_power_capped_gpu_is_labelled_so(monkeypatch, tmp_path):
    """Four ranks' step timers, each on its own GPU of a recorded NVML (its bus id given: no CUDA here), each
    window of each rank in turn, on a clock the test steps. Rank 2's GPU is held by its software power cap at the
    recorded H200's rate (51%: its counter advances so while rank 2 steps) and it computes 30 ms a step against
    the others' 10. The diagnosis names rank 2 and labels it GPU throttled (software power cap)."""
    share = _recorded_power_cap()
    assert share == pytest.approx(0.508, abs=0.001)
    gpus = [FakeGpu(f"00000000:{16 + r:02X}:00.0", fields={SW_POWER_CAP: 0}) for r in range(4)]
    install(monkeypatch, FakeNvml(gpus))
    clock = _Clock()
    monkeypatch.setattr(time, "perf_counter", clock.now)
    monkeypatch.setattr(time, "time", clock.now)
    out = io.StringIO()
    timers = [StepTimer(every=2, stream=out, state_dir=tmp_path / str(r), stacks=False,
                        gpu_bus=f"0000:{16 + r:02x}:00.0") for r in range(4)]
    for window in range(4):
        for rank, timer in enumerate(timers):
            if window == 0:  # its place is taken at its first step
                monkeypatch.setenv("RANK", str(rank))
                monkeypatch.setenv("LOCAL_RANK", str(rank))
                monkeypatch.setenv("WORLD_SIZE", "4")
            compute = 0.03 if rank == 2 else 0.01
            for _ in range(2):
                with timer.step():
                    clock.spend(compute)
                    with timer.wait():
                        clock.spend(0.032 - compute)
                    if rank == 2:  # within the step: the window's report at its end reads it
                        gpus[2].fields[SW_POWER_CAP] += int(share * 0.032 * 1e9)
    for timer in timers:
        timer.close()
    records = [r for r in map(read_line, out.getvalue().splitlines()) if r is not None]
    assert {(r.rank, r.bus) for r in records} == {(r, f"0000:{16 + r:02x}:00.0") for r in range(4)}
    capped = [r.gpu_now.held().get("pwr", 0) / (r.t1 - r.t0) for r in records if r.rank == 2]
    assert capped and all(0.3 < c < 0.7 for c in capped), capped
    report = find_stragglers(records, {r: f"n{r}" for r in range(4)})
    assert [s.rank for s in report.stragglers] == [2], report.reason
    s = report.stragglers[0]
    assert s.cause == "GPU throttled (software power cap)", s.cause_why
    assert "held by software power cap for 5" in s.cause_why and "against the other ranks' 0%" in s.cause_why
    assert "GPU throttled (software power cap): its GPU's clocks were held" in s.describe()


def _job(slow: int, cpu: dict[int, HostLoad] | None = None, gpu: dict[int, GpuReading] | None = None,
         spare: GpuReading | None = None, windows: int = 4) -> list[StepRecord]:
    """Four ranks, rank `slow` computing 150 ms a step against 100; each rank's host load and GPU reading as
    given (`spare`: every other rank's GPU)."""
    records = []
    for w in range(windows):
        for r in range(4):
            c = 0.15 if r == slow else 0.10
            wait = 0.155 - c
            records.append(StepRecord(
                rank=r, local_rank=0, world=4, host=f"h{r}", pid=10 + r, first=10 * w, last=10 * w + 9, n=10,
                t0=100.0 + 1.55 * w, t1=101.55 + 1.55 * w, step_s=Stats(1.55, 0.155, 0.155),
                compute_s=Stats(10 * c, c, c), wait_s=Stats(10 * wait, wait, wait),
                cpu=(cpu or {}).get(r, HostLoad(cpu_s=1.0, runq=0.5, steal=0.0)),
                gpu_now=(gpu or {}).get(r, spare)))
    return records


FULL = GpuReading(sm_mhz=1980, power_w=650.0, temp_c=60, reasons=0)


@pytest.mark.parametrize("loads, cause, why", [
    ({1: HostLoad(cpu_s=1.4, runq=3.0, steal=0.0)}, "host side (CPU contention)",
     "its host has 3 runnable tasks per CPU against the other ranks' hosts' 0.5"),
    ({1: HostLoad(cpu_s=1.4, runq=0.5, steal=0.12)}, "host side (CPU contention)",
     "its hypervisor steals 12% of its host's CPU time against the other ranks' hosts' 0%"),
    ({1: HostLoad(cpu_s=1.05, runq=0.5, steal=0.0)}, "host side (off CPU)", "it was off a CPU for 90% of"),
    ({1: HostLoad(cpu_s=1.45, runq=0.5, steal=0.0)}, "", "it used a CPU for 90% of the time it computes longer"),
])
def test_a_straggler_on_a_contended_host_is_host_side(loads, cause, why):
    """Synthetic /proc figures on CPU ranks: rank 1's host's run queue (3 runnable tasks per CPU), its hypervisor's
    steal, or rank 1 using hardly more CPU than the others while computing 0.5 s longer a window (held off its CPU:
    stopped, a CPU quota; what NodeQuota of tests/helpers/slurm_jobs.py does shows only so), or using a CPU for
    the extra time (more work, a slower CPU: no label)."""
    report = find_stragglers(_job(1, cpu=loads))
    [s] = report.stragglers
    assert (s.rank, s.cause) == (1, cause) and why in s.cause_why, s.cause_why


def test_ranks_on_one_host_share_its_run_queue_and_name_no_contention():
    """Every rank's host is busy and stolen from alike (one host): no contention label from what they share; the
    straggler used its CPU for its extra time (no label either)."""
    loads = {r: HostLoad(cpu_s=1.5 if r == 1 else 1.0, runq=3.0, steal=0.2) for r in range(4)}
    [s] = find_stragglers(_job(1, cpu=loads)).stragglers
    assert s.cause == "" and "it used a CPU for 100% of the time" in s.cause_why


def test_a_gpu_at_full_clocks_that_computes_longer_is_slower_at_full_clocks():
    [s] = find_stragglers(_job(3, spare=FULL)).stragglers
    assert s.cause == "GPU slower at full clocks"
    assert "its GPU runs at 1980 MHz as the other ranks' do (1980 MHz)" in s.cause_why


def test_every_gpu_power_capped_is_no_throttled_straggler():
    """A busy healthy job's GPUs are all power capped (the recorded H200 was, half its time): only more than the
    others' counts."""
    capped = GpuReading(sm_mhz=1755, power_w=700.0, temp_c=70, reasons=0x4, held_s=(("pwr", 0.8),))
    [s] = find_stragglers(_job(3, spare=capped)).stragglers
    assert s.cause == "GPU slower at full clocks"


def test_lower_clocks_without_a_reason_and_a_throttle_seen_only_in_the_mask():
    slow_clock = GpuReading(sm_mhz=1410, power_w=500.0, temp_c=60, reasons=0)
    [s] = find_stragglers(_job(0, gpu={0: slow_clock}, spare=FULL)).stragglers
    assert s.cause == "GPU throttled (clocks down, no reason given)" and "1410 MHz against" in s.cause_why
    hot = GpuReading(sm_mhz=1980, power_w=650.0, temp_c=92, reasons=0x40)  # no counters: the mask alone
    [s] = find_stragglers(_job(0, gpu={0: hot}, spare=FULL)).stragglers
    assert s.cause == "GPU throttled (hardware thermal slowdown)"


def test_no_readings_no_label():
    records = [StepRecord(**{**r.__dict__, "cpu": None, "gpu_now": None}) for r in _job(2)]
    [s] = find_stragglers(records).stragglers
    assert s.cause == "" and s.cause_why == "no GPU reading, and no host figures in its records"
    assert slow_cause(7, []).label == ""
