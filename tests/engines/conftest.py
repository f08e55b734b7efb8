"""Fixtures of the engine tests: private job records per test, no real Kubernetes cluster. The real Slurm cluster
is the session's one (tests/conftest.py's `slurm`)."""

from __future__ import annotations

from pathlib import Path

import pytest


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
