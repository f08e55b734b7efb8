"""Fixtures of the operate tests: a real Slurm cluster (two fake nodes on this host, tests/engines' fixture)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.engines.slurm_cluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm():
    """slurmctld, two slurmd (n1, n2) and munged of their own, stopped by PID at the end."""
    # Not under pytest's temp dir: munged (user munge) must reach its socket, and that dir is root-only.
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-op-"))
    try:
        with SlurmCluster(root, nodes=2) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)
