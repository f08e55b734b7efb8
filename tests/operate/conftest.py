"""Fixtures of the operate tests: the session's real Slurm cluster (tests/conftest.py's `slurm`; nodes n1 and n2,
the default partition), reached through the environment as scontrol and gpuval reach it on a node."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cluster(slurm, monkeypatch, tmp_path: Path):
    """The session's cluster with every node in service (scontrol reads SLURM_CONF from the environment); the
    nodes keep their last full result in the test's own state directory (GPUVAL_STATE_DIR, as docs set it)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    return slurm
