"""What a process's environment says of where it runs (gpuval.node.host): the one rule for the job it is in, which
the step timer, the Flight Recorder's stem, the probe's check of a rank and a Result's `where.job_id` all read."""

from __future__ import annotations

from gpuval.node.host import job_of
from gpuval.workloads.base import this_host


def test_the_job_a_process_is_in():
    assert job_of({"TORCHELASTIC_RUN_ID": "r1", "SLURM_JOB_ID": "77"}) == "77"  # the scheduler's own first
    assert job_of({"TORCHELASTIC_RUN_ID": "r1", "AZUREML_RUN_ID": "run-9"}) == "run-9"
    assert job_of({"TORCHELASTIC_RUN_ID": "none", "GPUVAL_JOB_ID": "mine"}) == "mine"  # torchrun without --rdzv-id
    assert job_of({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": ""}) == "" and job_of({}) == ""


def test_a_records_job_is_the_same_rule(monkeypatch):
    """A Result's `where.job_id` read with that rule (it once read another: Slurm's, Azure ML's or GPUVAL_JOB_ID,
    never torchrun's rendezvous id)."""
    for key in ("SLURM_JOB_ID", "AZUREML_RUN_ID", "GPUVAL_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "rdzv-4")
    assert this_host(sku="Standard_ND96isr_H100_v5", gpu_count=0).job_id == "rdzv-4"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert this_host(sku="Standard_ND96isr_H100_v5", gpu_count=0).job_id is None
