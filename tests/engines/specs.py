"""Fixed specs for render tests: the source documents' NCCL job, with a fixed run id."""

from __future__ import annotations

from gpuval.workloads.base import WorkloadRequest, get_workload


def nccl_spec(**overrides):
    """2 x ND96asr_v4, 8 GPUs each, all_reduce 8 B .. 8 GiB (documents 000-002)."""
    values = dict(workload="nccl", nodes=2, gpus_per_node=8, sku="Standard_ND96asr_v4",
                  image="jzacr3.azurecr.io/pytorch_nccl_tests_2303:latest", run_id="run-1")
    values.update(overrides)
    return get_workload("nccl").build(WorkloadRequest(**values))
