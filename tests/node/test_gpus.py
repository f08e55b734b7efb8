"""Placing a process beside a GPU: real processes, so the affinity and memory policy set are the
kernel's own (read back with sched_getaffinity and get_mempolicy); matching CUDA devices to NVML GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpuval.node.gpus import NvmlGpu, match_devices

PROBE = """
import ctypes, json, os, sys
from gpuval.node.gpus import pin_near
said = pin_near(json.loads(sys.argv[1]), json.loads(sys.argv[2]))
mode, mask = ctypes.c_int(0), (ctypes.c_ulong * 16)()
ctypes.CDLL(None, use_errno=True).syscall(239, ctypes.byref(mode), mask, ctypes.c_ulong(1024), None, 0)
print(json.dumps({"said": said, "cpus": sorted(os.sched_getaffinity(0)), "policy": [mode.value, mask[0]]}))
"""


def _probe(cpus, node):
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cpus), json.dumps(node)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def test_pin_near_places_the_process_on_the_gpus_cpus_and_node():
    cpu = max(os.sched_getaffinity(0))
    got = _probe([cpu], 0)
    assert got["cpus"] == [cpu] and got["policy"] == [2, 1]  # MPOL_BIND, node 0
    assert got["said"] == f"CPUs {cpu}, memory on NUMA 0"


def test_pin_near_says_what_it_could_not_do():
    """No such NUMA node, no known CPUs: the process runs unplaced and says so (a copy figure then says how it was
    taken), never an exception that loses the measurement."""
    got = _probe([], 63)
    assert got["cpus"] == sorted(os.sched_getaffinity(0)) and got["policy"][0] == 0  # default policy kept
    assert got["said"].startswith("CPUs not pinned (the GPU's local CPUs are unknown), memory not bound (")
    assert "node 63" in got["said"]


def test_cuda_devices_match_nvml_gpus_by_uuid_then_bus_id():
    known = [NvmlGpu(0, "0001:00:00.0", "GPU-aaaa"), NvmlGpu(5, "000a:00:00.0", "GPU-bbbb")]
    # torch prints UUIDs without "GPU-"; a MIG instance's UUID and an unknown bus match nothing
    got = match_devices([("000A:00:00.0", None), (None, "aaaa"), ("0003:00:00.0", "MIG-cccc")], known)
    assert [g.index if g else None for g in got] == [5, 0, None]
