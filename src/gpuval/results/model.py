"""The Result record (versioned): what ran, where, with which parameters, what it measured, the verdict."""

from __future__ import annotations

import os
import re
import secrets
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuval.results.data import DATA_MODELS, Kind, RecordData

SCHEMA_VERSION = 1


class Status(str, Enum):
    """Verdict of one check or measurement. ERROR means "could not run", never "unhealthy"."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"
    SKIPPED = "skipped"


# Severity for combining verdicts: a failure outranks "could not run", which outranks a warning.
_SEVERITY = {Status.SKIPPED: 0, Status.PASS: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


def severity(status: Status) -> int:
    """How bad a status is, for sorting: skipped < pass < warn < error < fail."""
    return _SEVERITY[status]


def worst_status(statuses: Iterable[Status]) -> Status:
    """The most severe status of several (SKIPPED when there are none)."""
    return max(statuses, key=severity, default=Status.SKIPPED)


class Metric(BaseModel):
    """One measured figure with its unit; `size_bytes` names the message size it was measured at."""

    model_config = ConfigDict(extra="forbid")

    name: str
    value: float | None
    unit: str = ""
    size_bytes: int | None = None


class Where(BaseModel):
    """The machine and job a record comes from."""

    hostname: str
    sku: str | None = None
    gpu_model: str | None = None
    gpu_count: int = 0
    ranks: int | None = None
    engine: str | None = None
    job_id: str | None = None


def _now() -> datetime:
    return datetime.now(timezone.utc)


# gpuval's own run ids: the UTC second the run began and 6 random hex digits. A drain reason names one, and only a
# reason with one is gpuval's (operate.node_state): a person's "gpuval: RMA-4711" is not.
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")


def is_run_id(text: str) -> bool:
    """Whether `text` is a run id of gpuval's own shape (`20261123T154437Z-de31a1`)."""
    return RUN_ID.fullmatch(text) is not None


def new_run_id() -> str:
    """A run id, shared by every record of one invocation; engines pass theirs down as GPUVAL_RUN_ID (one of
    gpuval's own shape: anything else there is not a run id gpuval gave, and a new one is made)."""
    env = os.environ.get("GPUVAL_RUN_ID", "")
    if is_run_id(env):
        return env
    return _now().strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


class Result(BaseModel):
    """One record: a collective sweep, a health check, a LAMMPS or training run, an imported log. `data` is the
    kind's own model (results/data.py); `where` is the machine it describes, never just the one that built it."""

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=lambda: uuid4().hex)
    run_id: str
    kind: Kind
    name: str
    started_at: datetime = Field(default_factory=_now)
    finished_at: datetime | None = None
    where: Where
    params: dict[str, Any] = Field(default_factory=dict)
    metrics: list[Metric] = Field(default_factory=list)
    status: Status
    reason: str = ""
    data: RecordData = Field(default_factory=lambda: DATA_MODELS["health"]())

    @model_validator(mode="before")
    @classmethod
    def _data_of_its_kind(cls, values: Any) -> Any:
        """`data` as the model of the record's kind, whether given as a dict (a stored record) or a model."""
        if isinstance(values, dict) and values.get("kind") in DATA_MODELS:
            model = DATA_MODELS[values["kind"]]
            data = values.get("data")
            if not isinstance(data, model):
                raw = data.model_dump() if isinstance(data, BaseModel) else dict(data or {})
                values = {**values, "data": model.model_validate(raw)}
        return values

    def metric(self, name: str) -> Metric | None:
        """The first metric of that name, or None."""
        return next((m for m in self.metrics if m.name == name), None)
