"""What a Result's `data` holds, per kind: one small model each, chosen by the record's kind.

Extra keys are kept (older or newer records, and readers that add a fact, still load and round-trip) and every
field has a default (records stored by an earlier gpuval, whose data may lack a field, still read back).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["collective", "health", "lammps", "train", "fleet"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="allow")


class CollectiveData(_Data):
    """A collective sweep: nccl-tests' -J `results` rows (size, count, type, redop, root, out_of_place and in_place
    with time, alg_bw, bus_bw, nwrong; read them as rows with collectives.nccltests_parse.rows_from_json) and the
    job's hosts, rank 0's first."""

    results: list[dict[str, Any]] = Field(default_factory=list)
    hosts: list[str] = Field(default_factory=list)


class HealthData(_Data):
    """A health check: its fault code, the value it read and the value expected (a number or a text such as "IB"
    or a NUMA layout), the unit, and the details it gathered (per-GPU figures, causes, ...)."""

    fault_code: str = ""
    value: Any = None
    expected: Any = None
    unit: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


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
    """A fleet check's record (workloads.fleet.records): role "test" (one test's measurement, stored with each of
    its nodes: per-cycle busbw samples, error, could-not-run reason, the evidence it gave) or "verdict" (a node's,
    link's, switch uplink's or group run's verdict with the evidence it rests on). `subject` names the test or the
    judged thing, `members` its nodes."""

    role: str = ""
    subject: str = ""
    members: list[str] = Field(default_factory=list)
    round: int | None = None
    samples: dict[str, list[float]] = Field(default_factory=dict)
    evidence: Any = None


RecordData = CollectiveData | HealthData | LammpsData | TrainData | FleetData

DATA_MODELS: dict[str, type[_Data]] = {
    "collective": CollectiveData, "health": HealthData, "lammps": LammpsData, "train": TrainData, "fleet": FleetData,
}
