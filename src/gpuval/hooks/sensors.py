"""What a window's step record says of a rank's surroundings, so that a straggler can be told apart: a throttled GPU,
a GPU slower at full clocks, or a host that does not give the rank its CPU (gpuval.diagnosis.slow_cause).

- The host (every rank): the process's CPU seconds over the window (time.process_time: a rank held off the CPU
  computes longer without using more of it), the host's runnable tasks (the running count of /proc/loadavg, read at
  each step's end through a file kept open: under a microsecond), divided by the CPUs this process may use, and the
  share of CPU time the hypervisor stole over the window (/proc/stat's steal, read once per window).
- The GPU (GPU ranks): NVML, opened at the timer's first step and kept open, the GPU found by its PCI bus id
  (never by CUDA's index, which CUDA_VISIBLE_DEVICES renumbers); once per window its SM clock, power, temperature,
  clock event reasons and the driver's clock event reason counters (gpuval.node.sampler, gpuval.node.nvml_state),
  the counters' rise over the window being the seconds each reason held the clocks down.

Nothing here may break training or cost it: pynvml is imported only when a GPU rank's timer starts
(`import gpuval.hooks` imports none of it), a reading that fails is None, and a GPU NVML cannot open is not asked
again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpuval.errors import GpuvalError
from gpuval.hooks.record import GpuReading, HostLoad

LOADAVG = "/proc/loadavg"
STAT = "/proc/stat"
# The clock event reason counters (gpuval.node.gpu_state.ClockEventCounters' fields) by the record's short keys.
COUNTER_KEYS = {"sw_power_cap_s": "pwr", "sync_boost_s": "sync", "sw_thermal_s": "swt", "hw_thermal_s": "hwt",
                "hw_power_brake_s": "brk"}


def running_tasks(loadavg: bytes) -> int | None:
    """The runnable tasks /proc/loadavg counts (its fourth field, `running/total`), this process among them."""
    fields = loadavg.split()
    if len(fields) < 4 or b"/" not in fields[3]:
        return None
    head = fields[3].split(b"/")[0]
    return int(head) if head.isdigit() else None


def cpu_jiffies(stat: str) -> tuple[int, int] | None:
    """(all CPU time, stolen time) in jiffies from /proc/stat's `cpu` line (user nice system idle iowait irq softirq
    steal ...; guest time is already inside user); None where there is none."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu" and len(fields) >= 9:
            try:
                values = [int(v) for v in fields[1:9]]
            except ValueError:
                return None
            return sum(values), values[7]
    return None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the CPU time between two /proc/stat readings that was stolen; None without both or time."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return max(0, after[1] - before[1]) / (after[0] - before[0])


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


class HostSensor:
    """The host around this rank, window by window: `sample()` at each step's end, `window()` at each report."""

    def __init__(self, loadavg: str = LOADAVG, stat: str = STAT) -> None:
        self._stat_path = stat
        try:
            self._loadavg: int | None = os.open(loadavg, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._loadavg = None
        try:
            self._cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._cpus = os.cpu_count() or 1
        self._running = self._samples = 0
        self._cpu0 = time.process_time()
        self._stat0 = cpu_jiffies(_read_text(stat) or "")

    def sample(self) -> None:
        """One reading of the runnable tasks (a step ended)."""
        if self._loadavg is None:
            return
        try:
            found = running_tasks(os.pread(self._loadavg, 256, 0))
        except OSError:
            found = None
        if found is not None:
            self._running += found
            self._samples += 1

    def window(self) -> HostLoad:
        """The window since the last call: CPU seconds, runnable tasks per CPU, stolen share; the next starts."""
        cpu = time.process_time()
        stat = cpu_jiffies(_read_text(self._stat_path) or "")
        load = HostLoad(cpu_s=max(0.0, cpu - self._cpu0),
                        runq=self._running / self._samples / self._cpus if self._samples else None,
                        steal=steal_share(self._stat0, stat))
        self._cpu0, self._stat0, self._running, self._samples = cpu, stat, 0, 0
        return load

    def close(self) -> None:
        if self._loadavg is not None:
            os.close(self._loadavg)
            self._loadavg = None


class GpuSensor:
    """NVML's view of the GPU at PCI bus id `bus`, one reading per window (`window()`) from `start()`."""

    def __init__(self, bus: str) -> None:
        self.bus = bus
        self._session: Any = None
        self._nv: Any = None
        self._handle: Any = None
        self._held: dict[str, float] | None = None
        self._gone = False

    def start(self) -> None:
        """Open NVML and read the counters the first window's rise is measured from (the timer's first step)."""
        self._open()

    def _open(self) -> bool:
        if self._nv is not None or self._gone:
            return not self._gone
        from gpuval.node.nvml import nvml_session

        try:
            session = nvml_session()
            nv = session.__enter__()
        except GpuvalError:  # no driver, no nvidia-ml-py: the rank trains on without GPU readings
            self._gone = True
            return False
        try:
            self._handle = nv.nvmlDeviceGetHandleByPciBusId(self.bus)
        except nv.NVMLError:  # not a GPU this process may see
            session.__exit__(None, None, None)
            self._gone = True
            return False
        self._session, self._nv = session, nv
        self._held = self._counters()
        return True

    def _counters(self) -> dict[str, float] | None:
        from gpuval.node.nvml_state import clock_event_counters

        counted = clock_event_counters(self._nv, self._handle)  # an NVML error is None there
        if counted is None:
            return None
        return {key: value for name, key in COUNTER_KEYS.items()
                if (value := getattr(counted, name)) is not None}

    def window(self) -> GpuReading | None:
        """The GPU now, and what held its clocks since the last call; None where NVML cannot say."""
        if not self._open():
            return None
        from gpuval.node.sampler import sample_once

        [now] = sample_once(self._nv, {0: self._handle}, 0.0)  # each value an NVML error leaves None
        before, after = self._held, self._counters()
        self._held = after
        held = tuple((key, after[key] - before[key]) for key in COUNTER_KEYS.values()
                     if before and after and key in before and key in after and after[key] > before[key])
        return GpuReading(now.sm_mhz, now.power_w, now.temperature_c, now.reasons, held)

    def close(self) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = self._nv = None
