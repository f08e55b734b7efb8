"""Host<->device copies per GPU: real worker processes (python -m gpuval.workloads.health.copy_worker)
with the torch stand-in on their PYTHONPATH. The stand-in records, at each pinned allocation, the process's CPU
affinity and memory policy (get_mempolicy), and the wall time of every copy, so the test sees that each buffer was
allocated after the process was placed on its GPU's node, that "alone" figures were taken one GPU at a time and the
"all at once" ones together."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from gpuval.checks.base import MeasurementUnavailable
from gpuval.checks.measured import GpuRef
from gpuval.node.gpus import MPOL_BIND
from gpuval.workloads.health.measurer_copy import copy_bandwidth
from tests.helpers.planted import plant_gpuval
from tests.workloads.health.torch_standin import h100_devices, install

CPUS = sorted(os.sched_getaffinity(0))


def _gpus() -> list[GpuRef]:
    return [GpuRef(0, "00000001:00:00.0", "GPU-recorded-ndv5-0", 0, (CPUS[0],)),
            GpuRef(1, "00000002:00:00.0", "GPU-recorded-ndv5-1", 0, (CPUS[-1],))]


def _phases(entries: list[dict]) -> tuple[dict[int, tuple[float, float]], dict[int, tuple[float, float]]]:
    """Per worker: the wall-time span of its first half of copies (alone) and of its second half (together)."""
    times: dict[int, list[float]] = defaultdict(list)
    for e in entries:
        if e["event"] in ("h2d", "d2h"):
            times[e["pid"]].append(e["wall"])
    alone, together = {}, {}
    for pid, walls in times.items():
        walls.sort()
        half = len(walls) // 2
        alone[pid], together[pid] = (walls[0], walls[half - 1]), (walls[half], walls[-1])
    return alone, together


def test_each_gpu_copies_from_its_own_numa_node_alone_then_all_at_once(monkeypatch, tmp_path):
    log = tmp_path / "torch.jsonl"
    install(monkeypatch, {"devices": h100_devices(h2d={1: 12.0}), "log": str(log), "copy_sleep": 0.004})
    figures = copy_bandwidth(_gpus(), nbytes=64 << 20, loops=4, samples=3)
    assert [f.gpu.index for f in figures] == [0, 1]
    assert [f.h2d for f in figures] == pytest.approx([50.0, 12.0])
    assert [f.d2h_all for f in figures] == pytest.approx([51.0, 51.0])
    assert figures[0].placed == f"CPUs {CPUS[0]}, memory on NUMA 0"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    pins = [e for e in entries if e["event"] == "pin"]
    assert sorted(tuple(e["affinity"]) for e in pins) == sorted([(CPUS[0],), (CPUS[-1],)])
    assert all(e["mempolicy"] == [MPOL_BIND, 1] for e in pins)  # bound to node 0 before the buffer existed
    assert {e["pid"] for e in pins} == {e["pid"] for e in entries} and os.getpid() not in {e["pid"] for e in pins}
    alone, together = _phases(entries)
    first, second = sorted(alone.values())
    assert first[1] <= second[0], "a GPU's alone figures were taken while another GPU copied"
    assert max(s for s, _ in together.values()) < min(e for _, e in together.values()), "not all at once"


def test_a_worker_that_cannot_see_its_gpu_is_could_not_run(monkeypatch, tmp_path):
    """Started from a folder holding a planted `gpuval/` package, the worker is gpuval's own (red team 5 N1)."""
    install(monkeypatch, {"devices": h100_devices()})
    pwned = plant_gpuval(tmp_path)
    monkeypatch.chdir(tmp_path)
    stranger = GpuRef(3, "00000008:00:00.0", "GPU-not-on-this-node", 0, ())
    with pytest.raises(MeasurementUnavailable, match="CUDA sees no GPU in the copy worker"):
        copy_bandwidth([stranger], nbytes=1 << 20, loops=1, samples=1)
    assert not pwned.exists()


def test_a_worker_that_measured_another_gpu_is_refused(monkeypatch):
    """The worker reports the bus id CUDA gave it; a figure of another GPU would blame the wrong one."""
    install(monkeypatch, {"devices": h100_devices()})
    wrong = GpuRef(3, "00000008:00:00.0", "GPU-recorded-ndv5-0", 0, ())
    with pytest.raises(MeasurementUnavailable, match="measured the GPU at 0001:00:00.0"):
        copy_bandwidth([wrong], nbytes=1 << 20, loops=1, samples=1)
