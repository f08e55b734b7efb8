"""The GPU check's burst step (scripts/gpu-check.sh): does the GEMM burst depend on the order it runs in, and how
much does it vary? The production burst (gpuval's TorchMeasurer.gemm_tflops: 20 GEMMs 8192^3 after 3 warm-ups)
ROUNDS times bf16 then fp16, then ROUNDS times fp16 then bf16, PAUSE seconds apart, on every GPU; one JSON line
per burst, then a table of median, lowest and highest per order and type (what sizes the burst bands' margins).

    python scripts/gpu-check-burst.py [ROUNDS] [PAUSE_S]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from gpuval.checks.figures import GpuRef
from gpuval.node.nvml import read_inventory
from gpuval.workloads.health.measurer import TorchMeasurer

ORDERS = (("bf16", "fp16"), ("fp16", "bf16"))


def main(rounds: int, pause_s: float) -> None:
    gpus = [GpuRef.of(g) for g in read_inventory().gpus if not g.mig_current]
    measurer = TorchMeasurer("gpu-check-burst")
    seen: dict[tuple[str, str], list[float]] = {}
    for order in ORDERS:
        for n in range(rounds):
            for position, dtype in enumerate(order):
                for ref, tflops in measurer.gemm_tflops(dtype, gpus):
                    seen.setdefault(("-then-".join(order), dtype), []).append(tflops)
                    print(json.dumps({"order": "-then-".join(order), "round": n, "position": position,
                                      "dtype": dtype, "gpu": ref.label(), "tflops": round(tflops, 1)}), flush=True)
            time.sleep(pause_s)
    print("\n| order | dtype | bursts | median TFLOPS | lowest | highest | spread % |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (order, dtype), values in seen.items():
        low, high = min(values), max(values)
        print(f"| {order} | {dtype} | {len(values)} | {statistics.median(values):.1f} | {low:.1f} | {high:.1f} | "
              f"{(high - low) / high * 100:.1f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5, float(sys.argv[2]) if len(sys.argv) > 2 else 2.0)
