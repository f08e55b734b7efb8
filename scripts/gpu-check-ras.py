"""The GPU check's NCCL RAS step: gpuval's RAS client (gpuval.collectives.nccl_ras_client, what `gpuval jobs
diagnose` asks on each node) against real NCCL, where the suite has only a stand-in of the protocol.

A job process (torch.distributed on NCCL, one rank on GPU 0, a 1 MiB all_reduce so its communicator exists) runs
with RAS enabled on a port of its own; the client then asks it for its status in the format this NCCL offers (JSON
from 2.28.7, else text) and once more as text. Prints one JSON document: the NCCL version torch carries, each answer's
format, communicators, ranks and findings, and the head of the text answer.

    python scripts/gpu-check-ras.py

Exit 0: the client read a status naming the job's communicator and its one rank; 1: it read none, or not that;
2: it could not run (no CUDA, no NCCL in torch, the job process did not start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

JOB = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
x = torch.ones(1 << 18, device="cuda:0")
dist.all_reduce(x)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""


def summary(status) -> dict:
    """What one answer said, in the terms diagnose uses."""
    return {"format": status.format, "nccl_version": status.nccl_version,
            "communicators": len(status.communicators),
            # JSON lists each rank; text gives each row's communicator size (its ranks only where a finding names them)
            "ranks": sum(len(c.ranks) or (c.size or 0) * c.count for c in status.communicators),
            "findings": [f.model_dump() for f in status.findings],
            "text_head": status.text[:600]}


def main() -> int:
    import torch

    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        print(json.dumps({"error": "no CUDA device or no NCCL in this torch"}))
        return 2
    from gpuval.collectives.nccl_ras_client import query_ras
    from gpuval.node.dist_env import free_port

    version = ".".join(map(str, torch.cuda.nccl.version()))
    port = free_port()
    env = {**os.environ, "NCCL_RAS_ENABLE": "1", "NCCL_RAS_ADDR": f"127.0.0.1:{port}"}
    job = subprocess.Popen([sys.executable, "-c", JOB, str(free_port()), "60"], env=env, stdout=subprocess.PIPE,
                           text=True)
    try:
        if (job.stdout.readline() or "").strip() != "ready":
            print(json.dumps({"error": "the NCCL job process did not start", "nccl": version}))
            return 2
        time.sleep(1)  # RAS's listening thread starts with the communicator; give it its first second
        answers = {}
        for fmt in ("auto", "text"):
            try:
                answers[fmt] = summary(query_ras("127.0.0.1", port, fmt=fmt, timeout_s=30, verbose=True))
            except Exception as exc:  # the step records whatever went wrong, then judges
                answers[fmt] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        job.kill()
        job.wait()
    print(json.dumps({"nccl": version, "answers": answers}, indent=1))
    good = [a for a in answers.values() if a.get("communicators", 0) >= 1 and a.get("ranks", 0) >= 1]
    return 0 if len(good) == len(answers) else 1


if __name__ == "__main__":
    sys.exit(main())
