"""The nccl workload's reader on recorded nccl-tests output: records name the job's hosts from the table's
`# Rank N ... on HOST device` lines, never the submitting machine."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuval.collectives.nccltests_parse import parse_text, read_documents
from gpuval.collectives.nccltests_text import device_line
from gpuval.workloads import base
from gpuval.workloads.base import ResultContext, get_workload
from tests.conftest import DATA
from tests.engines.specs import nccl_spec

LOGS = DATA / "nccl-tests"
# The Rank lines of 2 nodes x 2 GPUs as `gpuval bench` prints them (nccl-tests' format); rank 0 on ndv4-b: hosts
# come in rank order, not sorted.
HEADER = "".join(
    device_line(rank, 0, 4100 + rank, node, rank % 2, f"0x0{rank}", "NVIDIA A100-SXM4-80GB") + "\n"
    for rank, node in enumerate(["ndv4-b", "ndv4-b", "ndv4-a", "ndv4-a"])
)


def test_the_parse_document_carries_the_hosts():
    table = (LOGS / "ndv4-2node-allreduce.txt").read_text()
    [doc] = [d.to_json() for d in read_documents(HEADER + table, "two-nodes.txt")]
    assert doc["hosts"] == ["ndv4-b", "ndv4-a"] and doc["nranks"] == 4
    [k80] = [d.to_json() for d in read_documents((LOGS / "azureml-k80-error-column.txt").read_text(), "k80.txt")]
    assert k80["hosts"] == ["2e3f9af7241040529530e810ce60fe5d000002"]
    [bare] = [d.to_json() for d in read_documents(table, "bare.txt")]  # a table without its header names no host
    assert bare["hosts"] == []


def test_records_describe_the_job_not_this_machine(monkeypatch):
    """This machine's NVML (a login node with 4 other GPUs) must not leak into the records."""
    monkeypatch.setattr(base, "_gpus", lambda: ("NVIDIA H100 80GB HBM3", 4))
    spec = nccl_spec(gpus_per_node=2)
    ctx = ResultContext(spec=spec, engine="slurm", job_id="4242", run_id="run-1",
                        started=datetime.now(timezone.utc))
    output = HEADER + (LOGS / "ndv4-2node-allreduce.txt").read_text()
    [record] = get_workload("nccl").read(output, ctx)
    assert record.where.hostname == "ndv4-b" and record.data.hosts == ["ndv4-a", "ndv4-b"]
    assert (record.where.gpu_model, record.where.gpu_count) == (None, 2)
    assert (record.where.engine, record.where.job_id, record.where.ranks) == ("slurm", "4242", 4)
    assert record.where.sku == "Standard_ND96asr_v4"
    assert parse_text(output)[0].hosts == ["ndv4-b", "ndv4-a"]


def test_the_job_writes_no_results_database():
    """The submitting side stores the records it reads back; rank 0 inside the job must not store them too."""
    assert nccl_spec().env["GPUVAL_DB"] == "none"
