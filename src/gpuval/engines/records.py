"""What gpuval remembers about the jobs it submitted: the spec, where the output goes, whether we cancelled it.

Engines forget finished jobs (squeue after MinJobAge, a deleted Kubernetes object); the record lets
`gpuval jobs logs` find a Slurm output file and `--wait --json` know which reader parses the output.
One JSON file per job under GPUVAL_JOBS_DIR, else the `jobs` folder of gpuval's data directory.

Records and job scripts hold the job's environment (`--env` values: tokens, passwords), so gpuval writes them
readable by their owner only (files 0600, the folders it creates 0700), on a login node shared with others.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

import platformdirs
from pydantic import BaseModel, Field

from gpuval.engines.spec import JobSpec
from gpuval.results.files import write_beside


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


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents readable by their owner only (0700); existing folders keep their mode
    (a shared folder the user named stays as it is)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        folder.chmod(0o700)  # mkdir's mode passes through the umask
    return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (results.files.write_beside: a temporary file beside it, renamed
    over it), its folder created private, the file readable by its owner only (0600)."""
    private_dir(path.parent)
    return write_beside(path.parent, path.name, text, 0o600, folder_link=True)


def save(record: JobRecord) -> None:
    """Write (or replace) a job's record, atomically, readable by its owner only."""
    write_private(_path(record.engine, record.job_id), record.model_dump_json(indent=2))


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
