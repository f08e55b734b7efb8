"""One GPU's pinned host<->device copies, in a short-lived process of its own (placed on the GPU's NUMA node).

`python -m gpuval.workloads.health.copy_worker REQUEST` (JSON: cpus, numa_node, nbytes, loops, samples), started
by gpuval.workloads.health.measurer_copy with CUDA_VISIBLE_DEVICES naming the one GPU. In order:

1. place this process beside the GPU (its local CPUs, memory bound to its NUMA node), before torch is imported,
   so the pinned host buffer is allocated on the GPU's own node, as nvbandwidth does (nvmlDeviceSetCpuAffinity
   before cuMemHostAlloc): on a 2-socket or 4-NUMA node an unplaced buffer makes half or three quarters of the
   GPUs copy across sockets, which the published figures never do;
2. measure H2D and D2H alone, print `{"ready": ...}` (one JSON line) and wait for `go` on stdin;
3. measure again while every other GPU's worker does the same (the measurer says go to all at once), print
   `{"together": ...}`.

An error is one JSON line `{"error": ...}` and exit 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gpuval.node.gpus import cuda_ids, pin_near


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _both(torch: Any, host: Any, dev: Any, req: dict[str, Any]) -> dict[str, float]:
    from gpuval.workloads.health.measurer_gpu import timed

    nbytes, loops, samples = int(req["nbytes"]), int(req["loops"]), int(req["samples"])
    return {"h2d": timed(torch, lambda: dev.copy_(host, non_blocking=True), nbytes, loops, samples),
            "d2h": timed(torch, lambda: host.copy_(dev, non_blocking=True), nbytes, loops, samples)}


def run(req: dict[str, Any]) -> int:
    """Place, allocate, measure alone, wait for go, measure together; JSON lines on stdout."""
    placed = pin_near(req.get("cpus") or [], req.get("numa_node"))
    import torch  # only now: nothing may allocate host memory before the process is placed

    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        _emit({"error": f"CUDA sees no GPU in the copy worker (CUDA_VISIBLE_DEVICES="
                        f"{req.get('visible', '?')})"})
        return 2
    bus, uuid = cuda_ids(torch.cuda.get_device_properties(0))
    torch.cuda.set_device(0)
    host = torch.empty(int(req["nbytes"]), dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(int(req["nbytes"]), dtype=torch.uint8, device="cuda:0")
    _emit({"ready": True, "placed": placed, "bus_id": bus, "uuid": uuid, "alone": _both(torch, host, dev, req)})
    if sys.stdin.readline().strip() != "go":
        return 0  # the measurer stopped before the together phase
    _emit({"together": _both(torch, host, dev, req)})
    return 0


def main(argv: list[str]) -> int:
    try:
        return run(json.loads(argv[0]))
    except Exception as exc:  # a process of its own: its failure is one line for the measurer, never a traceback
        _emit({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
