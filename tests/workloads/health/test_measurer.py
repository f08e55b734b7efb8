"""The health workload's torch measurer, on real gloo ranks (the path NCCL takes on a GPU node)."""

from __future__ import annotations

from gpuval.checks.measured import GpuRef
from gpuval.workloads.health.measurer import TorchMeasurer


def test_health_allreduce_saves_no_collective_record(tmp_path):
    """A real 2-rank all_reduce through the health measurer (gloo on CPU, the path NCCL takes on a GPU node):
    it measures, counts no wrong element, and leaves no `collective all_reduce` record beside the health one."""
    results = tmp_path / "results.jsonl"
    gpus = [GpuRef(0, "0001:00:00.0"), GpuRef(1, "0002:00:00.0")]
    measured = TorchMeasurer("health-run", str(results), backend="gloo").allreduce_busbw(1024**2, gpus, 1, {})
    assert measured.busbw > 0 and measured.wrong == 0 and measured.ranks == 2
    assert not results.exists() or not results.read_text().strip()
