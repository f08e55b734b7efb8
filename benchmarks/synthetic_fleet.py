"""A synthetic fleet's collective sweeps, shaped like real nccl-tests all_reduce on 8-GPU nodes.

Each size's time is latency + bytes / bandwidth, with a little noise; a slow node has a lower bandwidth. Used by
the store benchmark (benchmarks/store_ingest.py) and the tests (planted slow nodes), never by gpuval itself. The
synthetic builders live under benchmarks/ (this module, fleet_isolation.py's simulated fleet), and the tests
import them from here: one copy, and benchmarks never import tests.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from gpuval.results import Metric, Result, Status, Where

SKU = "Standard_ND96asr_v4"
SIZES = [8 * 2**i for i in range(30)]  # 8 B .. 4 GiB: 30 sizes, as `-b 8 -e 4G -f 2`


def sweep_rows(peak_busbw: float, rng: random.Random, nranks: int = 8, latency_us: float = 25.0) -> list[dict]:
    """nccl-tests -J rows for one all_reduce sweep peaking near `peak_busbw` GB/s."""
    factor = 2 * (nranks - 1) / nranks
    rows = []
    for size in SIZES:
        sides = {}
        for side in ("out_of_place", "in_place"):
            bw = peak_busbw / factor * rng.uniform(0.985, 1.015)  # algbw the wire gives, GB/s
            time_us = latency_us + size / (bw * 1e3)
            algbw = size / time_us / 1e3
            sides[side] = {"time": round(time_us, 2), "alg_bw": round(algbw, 2), "bus_bw": round(algbw * factor, 2),
                           "nwrong": 0}
        rows.append({"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1, **sides})
    return rows


def node_record(run_id: str, host: str, peak_busbw: float, rng: random.Random, started: datetime) -> Result:
    """One node's all_reduce Result record, as `gpuval bench` writes it."""
    rows = sweep_rows(peak_busbw, rng)
    best = [max(r["out_of_place"]["bus_bw"], r["in_place"]["bus_bw"]) for r in rows]
    peak = max(range(len(rows)), key=best.__getitem__)
    metrics = [
        Metric(name="avg_busbw", value=sum(best) / len(best), unit="GB/s"),
        Metric(name="peak_busbw", value=best[peak], unit="GB/s", size_bytes=rows[peak]["size"]),
        Metric(name="busbw", value=best[-1], unit="GB/s", size_bytes=rows[-1]["size"]),
        Metric(name="wrong_elements", value=0, unit="elements"),
    ]
    return Result(run_id=run_id, kind="collective", name="all_reduce", started_at=started,
                  finished_at=started + timedelta(seconds=40),
                  where=Where(hostname=host, sku=SKU, gpu_model="NVIDIA A100-SXM4-40GB", gpu_count=8, ranks=8,
                              engine="slurm"),
                  params={"min_bytes": 8, "max_bytes": SIZES[-1], "step_factor": 2}, metrics=metrics,
                  status=Status.PASS, data={"results": rows, "hosts": [host]})


def fleet_run(run_id: str, nodes: int, slow: dict[str, float] | None = None, seed: int = 0,
              started: datetime | None = None, peak_busbw: float = 232.0) -> list[Result]:
    """`nodes` nodes node0001.. of one run; `slow` maps a host to the fraction of bandwidth it keeps."""
    rng = random.Random(seed)
    started = started or datetime.now(timezone.utc)
    slow = slow or {}
    return [node_record(run_id, host, peak_busbw * slow.get(host, 1.0), rng, started + timedelta(seconds=i % 60))
            for i, host in enumerate(f"node{n:04d}" for n in range(1, nodes + 1))]
