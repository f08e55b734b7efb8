"""gpuval's job records name the cluster a job was sent to and when (gpuval.engines.records): a record of another
cluster, or of an earlier job of the same id, is not the live job's and is not used (issue 39 item 4). The rule on
its own, and through the local engine (its cluster: this host), whose record is all it knows of a job: a jobs folder
on a home shared between hosts holds other hosts' local jobs. Real Slurm's side (its ClusterName, a job id begun
again) is in tests/workloads/diagnose/test_slurm.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpuval.engines import get_engine, records
from gpuval.engines.spec import JobSpec
from gpuval.errors import UsageError
from gpuval.node.host import hostname

SENT = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def _record(cluster: str, sent: datetime = SENT, engine: str = "slurm", job: str = "2") -> records.JobRecord:
    return records.JobRecord(engine=engine, job_id=job, spec=JobSpec(name="j", command=["true"]), submitted_at=sent,
                             cluster=cluster, workdir="/nowhere")


def test_a_record_is_the_live_jobs_only_where_nothing_says_otherwise():
    assert records.mismatch(_record("gv1"), "gv1", SENT + timedelta(seconds=3)) == ""
    assert records.mismatch(_record("gv1"), "gv2", SENT) == "it was sent to cluster 'gv1', not this one ('gv2')"
    assert "an earlier job of the same id" in records.mismatch(_record("gv1"), "gv1", SENT + timedelta(days=1))
    assert records.mismatch(_record("gv1"), "gv1", None) == ""  # the engine no longer knows the job: no evidence
    assert records.mismatch(_record(""), "gv1", SENT) == ""  # an older gpuval's record names no cluster
    naive = _record("gv1", SENT.replace(tzinfo=None))  # written as UTC without its zone
    assert records.mismatch(naive, "gv1", SENT) == ""


def test_the_local_engine_uses_no_record_of_another_host(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUVAL_JOBS_DIR", str(tmp_path))
    records.save(_record("other-host", engine="local", job="job-1"))
    engine = get_engine("local")
    with pytest.raises(UsageError, match="no local job 'job-1'"):
        engine.status("job-1")
    assert engine.notes == ["gpuval's record of local job job-1 is not used: it was sent to cluster 'other-host', "
                            f"not this one ('{hostname()}')"]
    records.save(_record(hostname(), engine="local", job="job-2"))
    assert get_engine("local").record("job-2") == _record(hostname(), engine="local", job="job-2")
