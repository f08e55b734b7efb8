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

`v` is the schema's version: fields are added without raising it (readers keep what they know and pass over the
rest), it rises only when a field changes meaning, and a reader refuses a version it does not know. A record whose
numbers are not finite is refused too: no such number may judge anything.
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

    def to_line(self) -> str:
        """The record as one line (newline included), under MAX_BYTES."""
        doc: dict[str, Any] = {
            "v": self.v, "rank": self.rank, "local_rank": self.local_rank, "world": self.world,
            "host": self.host[:TEXT_LIMIT], "pid": self.pid, "gpu": self.gpu, "bus": self.bus,
            "job": self.job[:TEXT_LIMIT], "steps": [self.first, self.last], "n": self.n,
            "t": [round(self.t0, 3), round(self.t1, 3)],
            "step_s": _stats(self.step_s), "compute_s": _stats(self.compute_s), "wait_s": _stats(self.wait_s),
            "coll": self.coll, "seq": self.seq,
        }
        line = PREFIX + json.dumps(doc, separators=(",", ":"), ensure_ascii=True) + "\n"
        if len(line) > MAX_BYTES:  # only a bus id longer than any PCI address could do it: drop it, keep the line
            doc["bus"] = None
            line = PREFIX + json.dumps(doc, separators=(",", ":"), ensure_ascii=True) + "\n"
        return line


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
        job=_text(doc, "job") or "", v=_int(doc, "v"),
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
