"""Fixtures of the engine tests: a real Slurm cluster for the session, private job records per test."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.engines.slurm_cluster import SlurmCluster


@pytest.fixture(autouse=True)
def _private_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Job records and local job folders go to the test's temp dir."""
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(jobs))
    return jobs


@pytest.fixture(autouse=True)
def _no_real_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches a real Kubernetes cluster: a dry run asks the cluster of the kubeconfig (kind discovery),
    so the default kubeconfig and the in-cluster service account are hidden; kmock tests pass their own."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture(scope="session")
def slurm():
    """Two Slurm nodes on this host (real slurmctld, slurmd x2, munged), stopped by PID at the end.

    MinJobAge=2: finished jobs leave squeue within seconds, so status must fall back to the job-completion
    record (there is no slurmdbd here, so sacct is disabled), the path clusters without accounting take.
    """
    # Not under pytest's temp dir: munged (user munge) must reach its socket, and that dir is root-only.
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-"))
    try:
        with SlurmCluster(root, nodes=2, min_job_age=2) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)
