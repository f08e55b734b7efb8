"""A GPU rank is placed beside its GPU before it allocates (workloads.ranks.place_near_gpu): its CPUs the GPU's local
ones, its memory from the GPU's NUMA node, both read from sysfs by the GPU's PCI bus id as CUDA names it. No GPU
here: the GPU is a CUDA properties object of the shape torch returns and a sysfs tree written under a temporary
root (LinuxMachine(root=...)); the pinning itself is real, in a child process so this one stays unpinned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_PLACE = """
import json, os, sys
from pathlib import Path
from types import SimpleNamespace
from gpuval.node.sysfs import LinuxMachine
from gpuval.workloads.ranks import place_near_gpu

root, cpu, bus = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "bus"
props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1b if bus else None, pci_device_id=0, uuid=None)
torch = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda device: props))
placed = place_near_gpu(torch, SimpleNamespace(type="cuda"), LinuxMachine(Path(root)))
cpu_rank = place_near_gpu(torch, SimpleNamespace(type="cpu"), LinuxMachine(Path(root)))
print(json.dumps({"placed": placed, "cpu_rank": cpu_rank, "affinity": sorted(os.sched_getaffinity(0))}))
"""


def _place(tmp_path: Path, cpu: int, bus: bool = True) -> dict:
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:1b:00.0"
    device.mkdir(parents=True, exist_ok=True)
    (device / "numa_node").write_text("0\n")
    (device / "local_cpulist").write_text(f"{cpu}\n")
    proc = subprocess.run([sys.executable, "-c", _PLACE, str(tmp_path), str(cpu), "bus" if bus else "none"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_gpu_rank_runs_on_its_gpu_s_local_cpus_with_its_numa_memory(tmp_path):
    cpu = max(os.sched_getaffinity(0))
    got = _place(tmp_path, cpu)
    assert got["affinity"] == [cpu]
    assert got["placed"].startswith(f"CPUs {cpu}, memory ")  # "on NUMA 0", or why the kernel would not bind it
    assert got["cpu_rank"] is None  # a CPU rank has no GPU to be near


def test_a_gpu_cuda_names_no_bus_for_is_not_placed_and_says_so(tmp_path):
    got = _place(tmp_path, max(os.sched_getaffinity(0)), bus=False)
    assert got["placed"] == "not placed (CUDA names no PCI bus id for this GPU)"
    assert got["affinity"] == sorted(os.sched_getaffinity(0))
