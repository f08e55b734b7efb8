"""NVML samples of GPUs under load: SM clock, power, GPU and HBM temperature and clock event reasons every 100 ms.

A GEMM burst or a bandwidth test says little about clocks on its own: a GPU with poor cooling or a capped power
limit passes a 30 ms burst. Wrap the load in `NvmlSampler` and judge the samples taken while it ran:

    with NvmlSampler([0, 1, 2, 3]) as sampler:
        run_the_load()
    for summary in sampler.summaries():
        ...  # median SM clock, peak temperature and power, reasons seen under load

Sampling runs on a thread of its own (NVML calls release the GIL). A value a GPU does not report is None; an NVML
error on one field of one sample is None for that sample (a sampler must never end the load it watches).

Every half second it also reads the processes on the GPUs (node.nvml_activity.ProcessReader): a process that was
not there when sampling began started on a GPU while the load ran, and the load's figures are a share of the GPU
(`LoadSummary.appeared`). A guard that reads only before and after an hours-long burn never sees it.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from gpuval.node.gpu_state import GpuProcess
from gpuval.node.nvml import nvml_session
from gpuval.node.nvml_activity import ProcessReader
from gpuval.node.nvml_state import field_id, field_values

PERIOD_S = 0.1
PROCESSES_EVERY = 5  # samples between two reads of the processes on the GPUs
# clock event reasons that mean the hardware or the driver is holding the clock down under load (nvml.h)
SLOWDOWN_REASONS = {
    0x2: "application/locked clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


@dataclass
class Sample:
    """One reading of one GPU, `t` seconds after sampling started."""

    t: float
    gpu: int
    sm_mhz: int | None
    power_w: float | None
    temperature_c: int | None
    reasons: int | None
    memory_temperature_c: int | None = None  # HBM (NVML_FI_DEV_MEMORY_TEMP); None: no HBM sensor


@dataclass
class LoadSummary:
    """One GPU over the sampled load."""

    gpu: int
    samples: int
    sm_mhz_median: float | None
    sm_mhz_min: int | None
    power_w_max: float | None
    temperature_c_max: int | None
    reasons_seen: list[str] = field(default_factory=list)  # SLOWDOWN_REASONS that appeared in any sample
    memory_temperature_c_max: int | None = None
    appeared: list[GpuProcess] = field(default_factory=list)  # processes that started on the GPU meanwhile


def _read(nv: Any, call: Any) -> Any:
    try:
        return call()
    except nv.NVMLError:
        return None


def sample_once(nv: Any, handles: dict[int, Any], t: float) -> list[Sample]:
    """One sample of each GPU through an open NVML session `nv`."""
    out = []
    for gpu, h in handles.items():
        power = _read(nv, lambda: nv.nvmlDeviceGetPowerUsage(h))
        memory = field_values(nv, h, [field_id(nv, "NVML_FI_DEV_MEMORY_TEMP")])[0]
        out.append(Sample(
            t=t, gpu=gpu, sm_mhz=_read(nv, lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            power_w=power / 1000.0 if power is not None else None,
            temperature_c=_read(nv, lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            reasons=_read(nv, lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
            memory_temperature_c=int(memory) if memory else None,
        ))
    return out


class NvmlSampler:
    """Samples `gpus` (NVML indices) every `period_s` on a thread, from __enter__ to __exit__."""

    def __init__(self, gpus: list[int], period_s: float = PERIOD_S) -> None:
        self.gpus = gpus
        self.period_s = period_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._appeared: dict[int, list[GpuProcess]] = {}

    def __enter__(self) -> "NvmlSampler":
        self._session = nvml_session()
        nv = self._session.__enter__()
        handles = {g: nv.nvmlDeviceGetHandleByIndex(g) for g in self.gpus}
        reader = ProcessReader(nv)
        there = {g: {p.pid for p in reader.read(g, h)} for g, h in handles.items()}  # before the load's first window
        start = time.monotonic()

        def run() -> None:
            count = 0
            while True:
                self.samples.extend(sample_once(nv, handles, time.monotonic() - start))
                count += 1
                if count % PROCESSES_EVERY == 0:
                    self._new_processes(reader, handles, there)
                if self._stop.wait(self.period_s):
                    return

        self._thread = threading.Thread(target=run, name="gpuval-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _new_processes(self, reader: ProcessReader, handles: dict[int, Any], there: dict[int, set[int]]) -> None:
        for g, h in handles.items():
            for p in reader.read(g, h):
                if p.pid not in there[g]:
                    there[g].add(p.pid)
                    self._appeared.setdefault(g, []).append(p)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._session.__exit__(None, None, None)

    def summaries(self) -> list[LoadSummary]:
        """Per GPU: median and lowest SM clock, peak power and temperature, slowdown reasons seen."""
        out = []
        for gpu in self.gpus:
            mine = [s for s in self.samples if s.gpu == gpu]
            clocks = [s.sm_mhz for s in mine if s.sm_mhz is not None]
            powers = [s.power_w for s in mine if s.power_w is not None]
            temps = [s.temperature_c for s in mine if s.temperature_c is not None]
            memory = [s.memory_temperature_c for s in mine if s.memory_temperature_c is not None]
            seen = 0
            for s in mine:
                seen |= s.reasons or 0
            out.append(LoadSummary(
                gpu=gpu, samples=len(mine), sm_mhz_median=statistics.median(clocks) if clocks else None,
                sm_mhz_min=min(clocks, default=None), power_w_max=max(powers, default=None),
                temperature_c_max=max(temps, default=None),
                reasons_seen=[name for bit, name in SLOWDOWN_REASONS.items() if seen & bit],
                memory_temperature_c_max=max(memory, default=None), appeared=list(self._appeared.get(gpu, [])),
            ))
        return out
