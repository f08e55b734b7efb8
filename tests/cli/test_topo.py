"""`gpuval topo` as a user runs it, on this machine and on a recording."""

from __future__ import annotations

import json

from tests.conftest import run_gpuval


def test_topo_on_this_machine_and_a_recording():
    proc = run_gpuval("topo", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["numa_nodes"] and doc["gpus"] == [] and "no NVIDIA driver" in doc["gpu_note"]
    proc = run_gpuval("topo", "--recorded", "Standard_ND96asr_v4", "--json")
    gpus = json.loads(proc.stdout)["gpus"]
    assert [(g["gpu"], g["numa_node"], g["cpus"], g["nearest_nics"]) for g in gpus[:3]] == [
        (0, 1, "24-47", ["mlx5_ib0", "mlx5_ib1"]), (1, 1, "24-47", ["mlx5_ib0", "mlx5_ib1"]),
        (2, 0, "0-23", ["mlx5_ib2", "mlx5_ib3"])]
