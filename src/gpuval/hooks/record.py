"""THE step record: what gpuval.hooks' step timer prints every N steps, one line per rank, and its one reader.

A line is `gpuval-step ` and a JSON object (schema version 1), under 960 bytes so that a launcher's 1 KiB messages
never tear it (gpuval.results.pieces) and a training script's own prints around it leave it whole:

    gpuval-step {"v":1,"rank":3,"local_rank":1,"world":8,"host":"gpu-07","pid":4242,"gpu":1,
                 "bus":"0000:19:00.0","job":"8812","steps":[100,149],"n":50,"t":[1764150000.125,1764150012.5],
                 "step_s":{"sum":12.4,"med":0.248,"max":0.31},"compute_s":{...},"wait_s":{...},"coll":150,"seq":450}

- `rank`, `local_rank`, `world`: the process's place in the job; `pid` its process id on its node.
- `host`: the host name as the process sees it, only a claim: the engine attributes each line to the node that
  printed it, and that attribution is what a diagnosis names.
- `gpu`, `bus`: the CUDA device index the rank uses and its PCI bus id (`0000:19:00.0`, the form
  gpuval.node.nccl_topo.normalize_bus_id writes), null off CUDA.
- `job`: the scheduler's job id where the process sees one (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, AZUREML_RUN_ID).
- `steps`: the first and last step of the window (0-based, inclusive); `n` the steps in it; `t` the wall-clock
  (Unix seconds) at the window's first step's start and its last step's end.
- `step_s`, `compute_s`, `wait_s`: sum, median and maximum over the window's steps of the step's time, the time
  the rank computed, and the time it waited in collectives (compute = step - wait), in seconds.
- `coll`: collectives completed in the window; `seq`: collectives launched since the timer started (the sequence
  number of the last one), what a hang's analysis compares across ranks.
- `xfer` (where the timer knows the bytes its collectives move): `bus`, the bytes they put on the bus as nccl-tests
  defines it (an all_reduce of S bytes over n ranks 2(n-1)/n x S, a reduce_scatter or all_gather of an S-byte
  buffer (n-1)/n x S), and `s`, the seconds the rank waited in those collectives: bus / s is the rank's effective
  bus bandwidth.
- `cpu` (every rank, where /proc can be read): `s`, the CPU seconds the process used in the window; `rq`, the
  host's runnable tasks per CPU this process may use (/proc/loadavg, sampled at each step's end, mean over the
  window); `st`, the share of the host's CPU time stolen by its hypervisor over the window (/proc/stat).
- `gpu_now` (GPU ranks, NVML, read once per window at its end): `sm` the SM clock (MHz), `w` the power draw (W),
  `c` the GPU temperature (C), `why` NVML's clock event reasons mask at that moment, and `held` the seconds each
  reason held the clocks down over the window (the driver's clock event reason counters: `pwr` software power cap,
  `sync` sync boost, `swt` software thermal, `hwt` hardware thermal, `brk` hardware power brake; only those that
  rose).

`v` is the schema's version: fields are added without raising it (readers keep what they know and pass over the
rest), it rises only when a field changes meaning, and a reader refuses a version it does not know. A record whose
numbers are not finite is refused too: no such number may judge anything. `xfer`, `cpu` and `gpu_now` were added
so (version 1 still): a record without them reads as before, and an older gpuval reading a newer record passes
over them; raising the version would have made every older reader refuse every newer record.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from gpuval.collectives.logtext import clip, strip_prefix

PREFIX = "gpuval-step "
VERSION = 1
MAX_BYTES = 960  # under slurmstepd's 1,024-byte message (gpuval.results.pieces.PIECE_BYTES)
TEXT_LIMIT = 64  # characters of a host name or job id kept in a record: the record stays under MAX_BYTES


@dataclass(frozen=True)
class Stats:
    """Sum, median and maximum of one time over a window's steps, in seconds."""

    sum: float
    med: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        """The stats of a non-empty list."""
        ordered = sorted(values)
        mid = len(ordered) // 2
        med = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return cls(math.fsum(ordered), med, ordered[-1])

    def finite(self) -> bool:
        """Every figure is a finite number."""
        return all(math.isfinite(v) for v in (self.sum, self.med, self.max))


@dataclass(frozen=True)
class Transfer:
    """The window's collectives whose bytes the timer knows: their bus bytes (nccl-tests' definition) and the
    seconds the rank waited in them."""

    bus_bytes: int
    seconds: float


@dataclass(frozen=True)
class HostLoad:
    """The host around a rank over a window: the process's CPU seconds, the runnable tasks per usable CPU (mean of
    the samples at its steps' ends) and the share of CPU time stolen by the hypervisor; None where not read."""

    cpu_s: float | None = None
    runq: float | None = None
    steal: float | None = None


# The reasons whose counters the driver keeps, by the record's keys, with their bit in NVML's clock event reasons
# mask (nvml.h: software power cap, sync boost, software thermal, hardware thermal, hardware power brake).
HELD_KEYS = {"pwr": 0x4, "sync": 0x10, "swt": 0x20, "hwt": 0x40, "brk": 0x80}


@dataclass(frozen=True)
class GpuReading:
    """NVML's reading of a rank's GPU at a window's end: SM clock, power, temperature, the clock event reasons
    then (a mask), and the seconds each counted reason (HELD_KEYS) held the clocks over the window, those that
    rose; None where not read."""

    sm_mhz: int | None = None
    power_w: float | None = None
    temp_c: int | None = None
    reasons: int | None = None
    held_s: tuple[tuple[str, float], ...] = ()

    def held(self) -> dict[str, float]:
        """Reason key -> seconds it held the clocks over the window."""
        return dict(self.held_s)


@dataclass(frozen=True)
class StepRecord:
    """One rank's report over one window of steps (see the module's docstring for each field)."""

    rank: int
    local_rank: int
    world: int
    host: str
    pid: int
    first: int
    last: int
    n: int
    t0: float
    t1: float
    step_s: Stats
    compute_s: Stats
    wait_s: Stats
    coll: int = 0
    seq: int = 0
    gpu: int | None = None
    bus: str | None = None
    job: str = ""
    v: int = VERSION
    xfer: Transfer | None = None
    cpu: HostLoad | None = None
    gpu_now: GpuReading | None = None

    def to_line(self) -> str:
        """The record as one line (newline included), under MAX_BYTES: where the longest values would pass it, the
        parts a record can do without go first (a bus id longer than any PCI address, then the GPU's reading, the
        host's, the transfer), never the times."""
        doc: dict[str, Any] = {
            "v": self.v, "rank": self.rank, "local_rank": self.local_rank, "world": self.world,
            "host": self.host[:TEXT_LIMIT], "pid": self.pid, "gpu": self.gpu, "bus": self.bus,
            "job": self.job[:TEXT_LIMIT], "steps": [self.first, self.last], "n": self.n,
            "t": [round(self.t0, 3), round(self.t1, 3)],
            "step_s": _stats(self.step_s), "compute_s": _stats(self.compute_s), "wait_s": _stats(self.wait_s),
            "coll": self.coll, "seq": self.seq,
        }
        if self.xfer is not None:
            doc["xfer"] = {"bus": self.xfer.bus_bytes, "s": _figure(self.xfer.seconds)}
        if self.cpu is not None:
            doc["cpu"] = _compact({"s": self.cpu.cpu_s, "rq": self.cpu.runq, "st": self.cpu.steal})
        if self.gpu_now is not None:
            g = self.gpu_now
            doc["gpu_now"] = {**_compact({"sm": g.sm_mhz, "w": g.power_w, "c": g.temp_c, "why": g.reasons}),
                              "held": {k: _figure(v) for k, v in g.held_s}}
        line = _line(doc)
        for part in ("bus", "gpu_now", "cpu", "xfer"):
            if len(line) <= MAX_BYTES:
                break
            doc[part] = None
            line = _line(doc)
        return line


def _line(doc: dict[str, Any]) -> str:
    return PREFIX + json.dumps({k: v for k, v in doc.items() if v is not None or k in ("gpu", "bus")},
                               separators=(",", ":"), ensure_ascii=True) + "\n"


def _compact(values: dict[str, float | int | None]) -> dict[str, float | int]:
    """The values read, figures to six digits (a figure not read is left out)."""
    return {k: v if isinstance(v, int) else _figure(v) for k, v in values.items() if v is not None}


def _figure(value: float) -> float:
    """Six significant digits: microseconds of a second-long step, and a short line."""
    return float(f"{value:.6g}")


def _stats(s: Stats) -> dict[str, float]:
    return {"sum": _figure(s.sum), "med": _figure(s.med), "max": _figure(s.max)}


def _int(doc: dict[str, Any], key: str, default: int | None = None) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(key)
    return value


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("not a finite number")
    return float(value)


def _read_stats(doc: dict[str, Any], key: str) -> Stats:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise ValueError(key)
    stats = Stats(_num(value.get("sum")), _num(value.get("med")), _num(value.get("max")))
    if min(stats.sum, stats.med, stats.max) < 0:
        raise ValueError(key)
    return stats


def _text(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(key)
    return value[:TEXT_LIMIT]


def _optional_num(part: dict[str, Any], key: str) -> float | None:
    value = part.get(key)
    if value is None:
        return None
    number = _num(value)
    if number < 0:
        raise ValueError(key)
    return number


def _optional_int(part: dict[str, Any], key: str) -> int | None:
    return None if part.get(key) is None else _int(part, key)


def _part(doc: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValueError(key)
    return value


def _transfer(doc: dict[str, Any]) -> Transfer | None:
    part = _part(doc, "xfer")
    if part is None:
        return None
    found = Transfer(_int(part, "bus"), _num(part.get("s")))
    if found.bus_bytes < 0 or found.seconds < 0:
        raise ValueError("xfer")
    return found


def _host_load(doc: dict[str, Any]) -> HostLoad | None:
    part = _part(doc, "cpu")
    if part is None:
        return None
    return HostLoad(_optional_num(part, "s"), _optional_num(part, "rq"), _optional_num(part, "st"))


def _gpu_reading(doc: dict[str, Any]) -> GpuReading | None:
    part = _part(doc, "gpu_now")
    if part is None:
        return None
    held = _part(part, "held") or {}
    power = _optional_num(part, "w")
    return GpuReading(_optional_int(part, "sm"), power, _optional_int(part, "c"), _optional_int(part, "why"),
                      tuple((k, _optional_num(held, k) or 0.0) for k in HELD_KEYS if k in held))


def _record(doc: dict[str, Any]) -> StepRecord:
    steps, times = doc.get("steps"), doc.get("t")
    if not (isinstance(steps, list) and len(steps) == 2 and isinstance(times, list) and len(times) == 2):
        raise ValueError("steps")
    first, last = _int({"s": steps[0]}, "s"), _int({"s": steps[1]}, "s")
    gpu = doc.get("gpu")
    record = StepRecord(
        rank=_int(doc, "rank"), local_rank=_int(doc, "local_rank", 0), world=_int(doc, "world"),
        host=_text(doc, "host") or "", pid=_int(doc, "pid", 0), first=first, last=last, n=_int(doc, "n"),
        t0=_num(times[0]), t1=_num(times[1]), step_s=_read_stats(doc, "step_s"),
        compute_s=_read_stats(doc, "compute_s"), wait_s=_read_stats(doc, "wait_s"), coll=_int(doc, "coll", 0),
        seq=_int(doc, "seq", 0), gpu=None if gpu is None else _int(doc, "gpu"), bus=_text(doc, "bus"),
        job=_text(doc, "job") or "", v=_int(doc, "v"), xfer=_transfer(doc), cpu=_host_load(doc),
        gpu_now=_gpu_reading(doc),
    )
    if not (0 <= record.rank < record.world and 0 <= first <= last and record.n >= 1):
        raise ValueError("rank or steps out of range")
    return record


def read_line(line: str) -> StepRecord | None:
    """The step record a line of a job's output carries (launcher prefixes such as `srun -l`'s removed), or None:
    another line, a record of an unknown major version, or one that is broken (wrong types, a non-finite number)."""
    text = strip_prefix(clip(line.lstrip("\ufeff")))
    at = text.find(PREFIX)
    if at < 0 or (at and not text[at - 1].isspace()):
        return None
    try:
        doc = json.loads(text[at + len(PREFIX):])
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            return None
        return _record(doc)
    except (ValueError, TypeError, RecursionError):
        return None
