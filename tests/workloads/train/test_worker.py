"""The training rank's helpers."""

from __future__ import annotations

from gpuval.workloads.train.worker import percentile


def test_percentile_nearest_rank():
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 50) == 10.0 and percentile(values, 95) == 19.0 and percentile([4.0], 95) == 4.0
