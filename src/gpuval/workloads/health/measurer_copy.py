"""Host<->device copy bandwidth per GPU, each from a process placed on the GPU's own NUMA node, alone
and with every GPU copying at once (a shared PCIe switch or root port shows only then).

One worker process per GPU (gpuval.workloads.health.copy_worker), started one after the other: each measures alone
while no other GPU copies, then holds its buffers and waits. Once every worker is ready they are all told `go`
together and measure again. Comparable to nvbandwidth host_to_device_memcpy_ce / device_to_host_memcpy_ce (same
buffer, loop count and median), and, all at once, to its host_to_all / all_to_host tests.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Any

from gpuval.checks.base import MeasurementUnavailable
from gpuval.checks.measure import COPY_BYTES
from gpuval.checks.measured import CopyFigure, GpuRef
from gpuval.node.nccl_topo import normalize_bus_id
from gpuval.node.unshadowed import child_env, module_argv
from gpuval.workloads.health.measurer_gpu import LOOPS, SAMPLES

WORKER = "gpuval.workloads.health.copy_worker"
READY_S = 300.0  # a worker's start-up (CUDA context) and alone phase; a hung GPU must not hang the suite


def _message(proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    """The worker's next JSON line; MeasurementUnavailable when it says error, ends, or says nothing in time."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], min(1.0, max(deadline - time.monotonic(), 0)))
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            break
        try:
            message = json.loads(line)
        except ValueError:
            continue  # a library's stray print; the worker's own lines are JSON
        if "error" in message:
            raise MeasurementUnavailable(f"copy worker: {message['error']}")
        return message
    raise MeasurementUnavailable(f"copy worker (pid {proc.pid}) said nothing within {timeout:.0f} s "
                                 f"(exit code {proc.poll()})")


def _same_gpu(gpu: GpuRef, seen: str | None) -> None:
    """The worker measured the GPU it was started for (its PCI bus id), or the figure would blame another one."""
    if gpu.bus_id and seen and normalize_bus_id(gpu.bus_id) != normalize_bus_id(seen):
        raise MeasurementUnavailable(f"the copy worker for {gpu.label()} measured the GPU at {seen}")


def _start(gpu: GpuRef, nbytes: int, loops: int, samples: int) -> subprocess.Popen:
    """A worker for `gpu`: CUDA sees only that GPU (named by its UUID, whatever the ordinals here are)."""
    visible = gpu.uuid or str(gpu.index)
    req = {"cpus": list(gpu.cpus), "numa_node": gpu.numa_node, "nbytes": nbytes, "loops": loops,
           "samples": samples, "visible": visible}
    env = child_env(dict(os.environ, CUDA_VISIBLE_DEVICES=visible, CUDA_DEVICE_ORDER="PCI_BUS_ID"))
    return subprocess.Popen([*module_argv(WORKER), json.dumps(req)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def copy_bandwidth(gpus: list[GpuRef], nbytes: int = COPY_BYTES, loops: int = LOOPS,
                   samples: int = SAMPLES) -> list[CopyFigure]:
    """Per GPU: H2D and D2H GB/s alone, then with every GPU copying at once, each from its own NUMA node."""
    procs: list[subprocess.Popen] = []
    first: list[dict[str, Any]] = []
    try:
        for gpu in gpus:  # one at a time: a GPU's "alone" figures are taken while no other GPU copies
            procs.append(_start(gpu, nbytes, loops, samples))
            first.append(_message(procs[-1], READY_S))
        for proc in procs:  # then all at once
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        second = [_message(proc, READY_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()  # a worker still waiting for go reads end-of-file and leaves
            if proc.poll() is None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    for gpu, a in zip(gpus, first):
        _same_gpu(gpu, a.get("bus_id"))
    return [CopyFigure(gpu, a["alone"]["h2d"], a["alone"]["d2h"], b["together"]["h2d"], b["together"]["d2h"],
                       a.get("placed", "")) for gpu, a, b in zip(gpus, first, second)]
