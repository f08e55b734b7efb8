"""What a Result's `data` holds, per kind: one small model each, chosen by the record's kind.

Extra keys are kept (older or newer records, and readers that add a fact, still load and round-trip) and every
field has a default (records stored by an earlier gpuval, whose data may lack a field, still read back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["collective", "health", "lammps", "train", "fleet", "job"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="allow")


class CollectiveData(_Data):
    """A collective sweep: nccl-tests' -J `results` rows (size, count, type, redop, root, out_of_place and in_place
    with time, alg_bw, bus_bw, nwrong; read them as rows with collectives.nccltests_parse.rows_from_json) and the
    job's hosts, rank 0's first."""

    results: list[dict[str, Any]] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)


GPU_KEYS = ("index", "bus_id", "gpu")  # what names the GPU in a per-GPU row; every other key is a figure or fact
_LABEL = re.compile(r"GPU (\d+) \((.*)\)")  # GpuRef.label(): "GPU 2 (00000003:00:00.0)"
# How gpuval before the one per-GPU form kept figures beside its labelled rows: lists whose position is the NVML
# index (written only when the GPUs measured were exactly 0..n-1), and the sustained load's {label: figures}.
_OLD_LISTS = ("h2d", "d2h", "memcpy", "triad", "bf16", "fp16", "together")


@dataclass
class GpuFigures:
    """One GPU's numeric figures in a health record: the GPU by NVML index and PCI bus id ("" when a record of an
    earlier gpuval did not say), each figure by name."""

    index: int
    bus_id: str = ""
    figures: dict[str, float] = field(default_factory=dict)


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: _number(v) for k, v in row.items()
            if k not in GPU_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _number(value: int | float) -> float:
    """A figure as a float: an integer beyond one (10**400 from an imported line) is +-inf, not an OverflowError
    that blanks every host's metrics in the exporter."""
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _gpu_of(row: dict[str, Any]) -> tuple[int, str] | None:
    """(NVML index, bus id) of a row: its own fields, else (a record of an earlier gpuval) its label."""
    if isinstance(row.get("index"), int):
        return row["index"], str(row.get("bus_id") or "")
    found = _LABEL.fullmatch(str(row.get("gpu", "")))
    return (int(found[1]), found[2]) if found else None


class HealthData(_Data):
    """A health check: its fault code, the value it read and the value expected (a number or a text such as "IB"
    or a NUMA layout), the unit, and the details it gathered (per-GPU figures, causes, ...).

    Per-GPU figures are stored once, in `details["gpus"]`: one row per GPU with its NVML index, PCI bus id and label
    (checks.figures.gpu_row); `details["gpu_units"]` names the unit of a row's figure that is not the record's own.
    `per_gpu()` is how every reader takes them."""

    fault_code: str = ""
    value: Any = None
    expected: Any = None
    unit: str = ""
    details: dict[str, Any] = Field(default_factory=dict)

    def per_gpu(self) -> list[GpuFigures]:
        """Each GPU's numeric figures, by NVML index; records of an earlier gpuval read the same (their labelled
        rows, NVML-index lists and the sustained load's figures by label)."""
        found: dict[int, GpuFigures] = {}
        rows = self.details.get("gpus")
        for row in rows if isinstance(rows, list) else []:
            gpu = _gpu_of(row) if isinstance(row, dict) else None
            if gpu is not None:
                found[gpu[0]] = GpuFigures(gpu[0], gpu[1], _numbers(row))
        by_label = self.details.get("by_gpu")
        for label, figures in by_label.items() if isinstance(by_label, dict) else ():
            gpu = _gpu_of({"gpu": label})
            if gpu is not None and isinstance(figures, dict):
                found.setdefault(gpu[0], GpuFigures(gpu[0], gpu[1])).figures.update(_numbers(figures))
        for key in _OLD_LISTS:
            values = self.details.get(key)
            for index, value in enumerate(values if isinstance(values, list) else []):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.setdefault(index, GpuFigures(index)).figures.setdefault(key, _number(value))
        return [found[i] for i in sorted(found)]

    def unit_of(self, figure: str) -> str:
        """The unit of a per-GPU figure: the record's, unless `gpu_units` names another."""
        units = self.details.get("gpu_units")
        return str(units[figure]) if isinstance(units, dict) and figure in units else self.unit


class LammpsData(_Data):
    """A LAMMPS run as log.lammps reports it (workloads.lammps.log.LammpsRun.to_json(): these fields, and the
    figures, OpenMP threads and CPU use as extra keys; the figures a reader wants are the record's metrics)."""

    source: str = ""
    version: str | None = None
    units: str | None = None
    procs: int | None = None
    steps: int | None = None
    atoms: int | None = None
    loop_time_s: float | None = None
    breakdown: dict[str, Any] | None = Field(default_factory=dict)
    benchmark: str | None = None


class TrainData(_Data):
    """A training run: the ranks' processes and hosts, the device, the NCCL paths and the transport verdict on
    them, the steps timed."""

    pids: list[int] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)
    device: str = ""
    nccl_transport: str | None = None
    transport_status: str | None = None
    transport_reason: str = ""
    timed_steps: int | None = None


class FleetData(_Data):
    """A fleet check's record (fleet.run.records): role "test" (one test's measurement, stored with each of
    its nodes: per-cycle busbw samples, error, could-not-run reason, the evidence it gave) or "verdict" (a node's,
    link's, switch uplink's or group run's verdict with the evidence it rests on). `subject` names the test or the
    judged thing, `members` its nodes."""

    role: str = ""
    subject: str = ""
    members: list[str] = Field(default_factory=list)
    round: int | None = None
    rounds: int | None = None  # a verdict's: the rounds the check took
    fault_codes: list[str] = Field(default_factory=list)  # a node verdict's: the codes it failed with
    samples: dict[str, list[float]] = Field(default_factory=dict)
    evidence: Any = None

    def evidence_of(self, key: str) -> Any:
        """One fact of a test's evidence (a mapping: reason, shortfall, ...); None where there is none."""
        return self.evidence.get(key) if isinstance(self.evidence, dict) else None


class JobData(_Data):
    """One node of a job's diagnosis (workloads.diagnose.records): the job, whether its symptoms nominate the node
    (`suspect`) and why, which parts said so, its ranks and GPUs in the job; with `--retest`, the fleet re-test's
    verdict on it, its run id and what was done (a drain)."""

    job_id: str = ""
    engine: str = ""
    suspect: bool = False
    why: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)
    retest_run: str = ""
    retest_status: str = ""
    retest_reason: str = ""
    action: str = ""


RecordData = CollectiveData | HealthData | LammpsData | TrainData | FleetData | JobData

DATA_MODELS: dict[str, type[_Data]] = {
    "collective": CollectiveData, "health": HealthData, "lammps": LammpsData, "train": TrainData, "fleet": FleetData,
    "job": JobData,
}
