"""Fixtures of the operate tests: a real Slurm cluster (two fake nodes on this host, tests/engines' fixture)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from gpuval.engines.slurm.nodes import read_node
from tests.engines.slurm_cluster import SlurmCluster
from tests.operate.support import scontrol


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


@pytest.fixture
def cluster(slurm, monkeypatch, tmp_path: Path):
    """The session's cluster with both nodes back in service (scontrol reads SLURM_CONF from the environment);
    the nodes keep their last full result in the test's own state directory (GPUVAL_STATE_DIR, as docs set it)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    for node in slurm.nodes:
        if read_node(node).drained:
            scontrol("update", f"nodename={node}", "state=resume")
    return slurm
