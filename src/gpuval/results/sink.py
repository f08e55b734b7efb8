"""JSON Lines file of Result records: appended one record per write, so concurrent writers and Ctrl-C lose nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

import platformdirs
from pydantic import ValidationError

from gpuval.errors import UsageError
from gpuval.results.model import Result


def default_results_path() -> Path:
    """GPUVAL_RESULTS, else results.jsonl in the user's data directory."""
    env = os.environ.get("GPUVAL_RESULTS")
    if env:
        return Path(env)
    return platformdirs.user_data_path("gpuval") / "results.jsonl"


def save_results(records: Iterable[Result], path: Path | None = None) -> Path:
    """Append records to the JSON Lines file; each record is one O_APPEND write, flushed at once."""
    target = path or default_results_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for record in records:
            os.write(fd, (record.model_dump_json() + "\n").encode())
    finally:
        os.close(fd)
    return target


def read_results(path: Path) -> list[Result]:
    """Read every record of a JSON Lines file; a line that is no Result is an error naming the line."""
    records = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                records.append(Result.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError) as exc:
                first = str(exc).splitlines()[0]
                raise UsageError(f"{path}:{lineno}: not a gpuval Result record ({first})") from None
    return records
