"""What a window's record says of a rank's surroundings (gpuval.hooks.sensors): the host's run queue and steal time
from /proc text (synthetic files in /proc's own formats, and this machine's real /proc), the process's CPU time, and
a GPU's NVML reading through a recorded NVML (tests/node/fake_nvml.py: no GPU here) found by its PCI bus id."""

from __future__ import annotations

import json
import os
import sys
import time
import pytest

from gpuval.hooks.sensors import GpuSensor, HostSensor, cpu_jiffies, running_tasks, steal_share
from tests.conftest import DATA
from tests.node.fake_nvml import FakeGpu, FakeNvml, install

STAT = "cpu  {user} 0 100 {idle} 0 0 0 {steal} 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\nprocs_running 3\n"


def test_proc_text_is_read_as_the_kernel_writes_it():
    assert running_tasks(b"1.32 2.34 3.42 7/125 6508\n") == 7
    assert running_tasks(b"garbage") is None and running_tasks(b"1 2 3 x/y 4") is None
    assert cpu_jiffies(STAT.format(user=800, idle=1000, steal=100)) == (2000, 100)
    assert cpu_jiffies("intr 1 2 3\n") is None and cpu_jiffies("cpu  a b c d e f g h\n") is None
    assert steal_share((2000, 100), (3000, 350)) == pytest.approx(0.25)
    assert steal_share(None, (3000, 350)) is None and steal_share((3000, 0), (3000, 0)) is None


def test_the_host_sensor_reports_each_window_from_proc(tmp_path):
    """Synthetic /proc files: 6 runnable tasks at each step's end on this process's CPUs, then a window in which a
    quarter of the host's CPU time was stolen; the process's own CPU time is counted (a busy loop)."""
    loadavg, stat = tmp_path / "loadavg", tmp_path / "stat"
    loadavg.write_text("4.00 3.00 2.00 6/300 999\n")
    stat.write_text(STAT.format(user=800, idle=1000, steal=100))
    sensor = HostSensor(str(loadavg), str(stat))
    for _ in range(3):
        sensor.sample()
    stat.write_text(STAT.format(user=1050, idle=1500, steal=350))  # 1,000 jiffies later, 250 stolen
    until = time.process_time() + 0.05
    while time.process_time() < until:
        pass
    window = sensor.window()
    assert window.runq == pytest.approx(6 / len(os.sched_getaffinity(0)))
    assert window.steal == pytest.approx(250 / 1000) and window.cpu_s >= 0.05
    again = sensor.window()  # nothing sampled since: no run queue; the same /proc/stat: no time passed
    assert again.runq is None and again.steal is None
    sensor.close()


def test_the_host_sensor_on_this_machines_proc_and_without_it(tmp_path):
    real = HostSensor()
    real.sample()
    window = real.window()
    assert window.runq is not None and window.runq > 0  # this process itself runs
    assert window.steal is None or 0 <= window.steal <= 1
    real.close()
    missing = HostSensor(str(tmp_path / "none"), str(tmp_path / "none"))
    missing.sample()
    window = missing.window()
    assert (window.runq, window.steal) == (None, None) and window.cpu_s is not None


def _recorded_h200() -> dict[int, int]:
    """The H200's clock event reason counters after 10 s of bf16 GEMMs (tests/data/nvml: 5.08 s power capped)."""
    probe = json.loads((DATA / "nvml" / "h200-probe-2026-11-26.json").read_text())
    return {field: value for field, _, _, value, _ in probe["f2"]}


def test_the_gpu_sensor_reads_its_gpu_by_bus_id_and_what_held_its_clocks(monkeypatch):
    """Two GPUs; the sensor's is the second by its bus id, whatever CUDA's numbering. Between two windows its
    software power cap counter rises by the recorded H200's 5.08 s; the reading says so, with clock, power and
    temperature."""
    busy = FakeGpu("00000000:3B:00.0", sm_now=1590, reasons=0x4, power_now_mw=699_810)
    install(monkeypatch, FakeNvml([FakeGpu("00000000:19:00.0"), busy]))
    busy.fields = {field: 0 for field in _recorded_h200()}
    sensor = GpuSensor("0000:3b:00.0")
    first = sensor.window()
    assert first is not None and first.held_s == ()
    busy.fields = _recorded_h200()
    reading = sensor.window()
    assert (reading.sm_mhz, reading.power_w, reading.temp_c, reading.reasons) == (1590, 699.81, 61, 0x4)
    assert reading.held() == {"pwr": pytest.approx(5.080234848)}
    sensor.close()


def test_no_gpu_where_nvml_cannot_read_one(monkeypatch):
    install(monkeypatch, FakeNvml([FakeGpu("00000000:19:00.0")]))
    assert GpuSensor("0000:aa:00.0").window() is None  # not a GPU of this node
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no nvidia-ml-py at all
    assert GpuSensor("0000:19:00.0").window() is None
