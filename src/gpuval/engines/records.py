"""What gpuval remembers about the jobs it submitted: the spec, where the output goes, whether we cancelled it.

Engines forget finished jobs (squeue after MinJobAge, a deleted Kubernetes object); the record lets
`gpuval jobs logs` find a Slurm output file and `--wait --json` know which reader parses the output.
One JSON file per job under GPUVAL_JOBS_DIR, else the `jobs` folder of gpuval's data directory.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import platformdirs
from pydantic import BaseModel, Field

from gpuval.engines.spec import JobSpec


class JobRecord(BaseModel):
    """One submitted job."""

    engine: str
    job_id: str
    spec: JobSpec
    run_id: str = ""
    submitted_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    output: str | None = Field(None, description="Output file of engines that write one (local, Slurm).")
    workdir: str | None = None
    cancelled: bool = False


def jobs_dir() -> Path:
    """Where job records live."""
    env = os.environ.get("GPUVAL_JOBS_DIR")
    return Path(env) if env else platformdirs.user_data_path("gpuval") / "jobs"


def _path(engine: str, job_id: str) -> Path:
    return jobs_dir() / engine / (re.sub(r"[^A-Za-z0-9_.-]", "_", job_id) + ".json")


def save(record: JobRecord) -> None:
    """Write (or replace) a job's record."""
    path = _path(record.engine, record.job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=2))
    tmp.replace(path)


def load(engine: str, job_id: str) -> JobRecord | None:
    """The record of a job gpuval submitted, or None."""
    path = _path(engine, job_id)
    if not path.exists():
        return None
    return JobRecord.model_validate_json(path.read_text())


def mark_cancelled(engine: str, job_id: str) -> None:
    """Remember that the user cancelled the job (engines that delete the job cannot say so afterwards)."""
    record = load(engine, job_id)
    if record is not None:
        save(record.model_copy(update={"cancelled": True}))
