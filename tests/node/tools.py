"""Stand-ins for programs a check runs (journalctl, systemctl, nv-fabricmanager, ib_write_bw, dcgmi): real
executables on PATH that print what the real program printed in a published capture, so the code under test
starts a process, reads its output and exit code exactly as it would with the real tool."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def fake_tool(bin_dir: Path, name: str, body: str) -> Path:
    """An executable `name` in `bin_dir` running the shell `body` (arguments in "$@")."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def printing(bin_dir: Path, name: str, output: Path | str, code: int = 0, stderr: str = "") -> Path:
    """A tool that prints a file's content (or a text) and exits with `code`."""
    shown = f"cat '{output}'" if isinstance(output, Path) else f"printf '%s\\n' '{output}'"
    err = f"printf '%s\\n' '{stderr}' >&2; " if stderr else ""
    return fake_tool(bin_dir, name, f"{err}{shown}; exit {code}")


def only_on_path(monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> None:
    """PATH is `bin_dir` alone, with the few programs the stand-ins use (cat, sleep): none of the host's journalctl,
    systemctl or RDMA tools."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for basic in ("cat", "sleep"):
        if not (bin_dir / basic).exists():
            os.symlink(f"/bin/{basic}", bin_dir / basic)
    monkeypatch.setenv("PATH", str(bin_dir))
