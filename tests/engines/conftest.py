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

    A third node, n3, holds one job from the start: `sleep` past its one-minute --time (Slurm's least), judged by
    test_slurm's time-limit test; submitted here, its minute runs beside the other tests instead of after them.
    MinJobAge=2: finished jobs leave squeue within seconds, so status must fall back to the job-completion
    record (there is no slurmdbd here, so sacct is disabled), the path clusters without accounting take.
    """
    # Not under pytest's temp dir: munged (user munge) must reach its socket, and that dir is root-only.
    root = Path(tempfile.mkdtemp(prefix="gpuval-slurm-"))
    try:
        with SlurmCluster(root, nodes=3, min_job_age=2) as cluster:
            cluster.overtime_job = _submit_overtime(cluster)
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _submit_overtime(cluster: SlurmCluster) -> str:
    """A one-CPU job on n3 that Slurm must stop at its time limit (tests/engines/test_slurm.py judges it)."""
    from gpuval.engines.slurm import SlurmEngine
    from gpuval.engines.spec import JobSpec

    with pytest.MonkeyPatch.context() as env:  # a session fixture: no monkeypatch fixture to lend
        env.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
        return SlurmEngine().submit(JobSpec(name="overtime", command=["sleep", "300"], time_limit_min=1,
                                            extras={"slurm": {"nodelist": "n3"}}))
