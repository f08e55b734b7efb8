"""Log readers behind `gpuval parse` and `gpuval import`: each finds the documents of its kind in a file.

A reader has a `kind`, a `parse(text, source)` that returns the documents it found (empty when none) and a
`summarize(doc, console)` for people. One file can hold several kinds (an nccl-tests table with NCCL INFO lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from gpuval.errors import UsageError


class LogReader(Protocol):
    """One kind of log gpuval understands."""

    kind: str

    def parse(self, text: str, source: str) -> list[dict[str, Any]]:
        """Every document of this kind in the text, as JSON-ready dicts with `source` and `kind`."""

    def summarize(self, doc: dict[str, Any], console: Console) -> None:
        """Print a readable summary of one document."""


def readers() -> list[LogReader]:
    """Every reader, in the order their documents are listed."""
    from gpuval.checks import nccl_debug
    from gpuval.collectives import nccltests_parse
    from gpuval.workloads.lammps import log as lammps_log

    return [nccltests_parse.READER, nccl_debug.READER, lammps_log.READER]


def read_text(path: Path) -> str:
    """A log file's text; an unreadable or binary file is a one-line error."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    return raw.decode("utf-8", errors="replace")


def parse_file(path: Path) -> list[tuple[LogReader, dict[str, Any]]]:
    """All documents of every kind in one file; a file that holds none is an error naming it."""
    text = read_text(path)
    found = [(reader, doc) for reader in readers() for doc in reader.parse(text, str(path))]
    if not found:
        kinds = ", ".join(r.kind for r in readers())
        raise UsageError(f"{path}: no test or log gpuval can read was found in it (looked for: {kinds})")
    return found
