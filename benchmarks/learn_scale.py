"""`gpuval baseline learn` on a fleet of 8,192 nodes x 8 GPUs (the issue's scale: under 10 s), against a floor
measured in the same run: json.loads of every line of the same file (what any reader of the file must at least
do). The fleet: the packaged ND96asr_v4 recording with every per-GPU figure gpuval measures (burst bf16 and fp16,
memcpy and triad, H2D/D2H alone and all at once, the 56 GPU pairs, the sustained load with its clocks and power)
run once through `gpuval health --recorded`, copied per node with 0.5% noise (benchmarks/learn_fleet.py): every
node a full health run, 37 records.

    python benchmarks/learn_scale.py [--nodes 8192] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.learn_fleet import fleet_lines, template_lines  # noqa: E402
from gpuval.baselines.learn import Choice, learn  # noqa: E402
from gpuval.baselines.learn_file import document, render  # noqa: E402
from gpuval.baselines.learn_read import read_files  # noqa: E402
from gpuval.node.recorded import recorded_data  # noqa: E402

TARGET_S = 10.0
FIGURES = {"gemm_bf16_tflops": 265.0, "hbm_triad_gbps": 1300.0, "h2d_all_gbps": 12.95, "d2h_all_gbps": 12.95,
           "p2p_read_gbps": 235.0, "p2p_write_gbps": 240.0, "load_sm_mhz": 1410.0, "load_power_w": 372.0}


def template(folder: Path) -> list[str]:
    """One node's full health run on the recorded ND96asr_v4 with every per-GPU figure."""
    data = recorded_data("Standard_ND96asr_v4")
    data["measurements"].update(FIGURES)
    machine = folder / "ndv4-full.yaml"
    machine.write_text(yaml.safe_dump(data))
    env = {**os.environ, "GPUVAL_DB": "none", "GPUVAL_SKU": "", "GPUVAL_RESULTS": str(folder / "t.jsonl"),
           "GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata"}
    proc = subprocess.run([sys.executable, "-m", "gpuval", "health", "--recorded", str(machine), "--json"],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the template run failed: {proc.stderr[-2000:]}")
    return template_lines(proc.stdout)


def floor(path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - start


def learned(path: Path) -> tuple[float, str, int]:
    """Seconds to read, learn and render the file as `gpuval baseline learn` does, what it learned, its size."""
    start = time.perf_counter()
    reading = read_files([path], None, lambda _line: None)
    found = learn(reading, Choice())
    text = render(document(found, datetime.now(timezone.utc), "bench", dict(reading.versions), reading.older))
    seconds = time.perf_counter() - start
    said = (f"{len(found.nodes)} nodes, {found.gpus} GPUs, {len(found.figures)} figures learned "
            f"({', '.join(f.measure.metric for f in found.figures)}), {reading.records} records")
    return seconds, said, len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=8192)
    parser.add_argument("--keep", type=Path, help="Write the fleet's records here (and keep them).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lines = template(folder)
        path = args.keep or folder / "fleet.jsonl"
        start = time.perf_counter()
        with path.open("w") as fh:
            fh.writelines(fleet_lines(lines, args.nodes))
        print(f"fleet: {args.nodes} nodes x {len(lines)} records, {path.stat().st_size / 1e6:.0f} MB "
              f"(built in {time.perf_counter() - start:.1f} s)")
        base = floor(path)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        seconds, said, size = learned(path)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(f"learned: {said}; file {size / 1e3:.0f} kB")
        print(f"floor (json.loads of every line): {base:.2f} s")
        verdict = "met" if seconds < TARGET_S else "MISSED"
        print(f"gpuval baseline learn (read, learn, render): {seconds:.2f} s = {seconds / base:.2f} x the floor; "
              f"peak memory grew {grown:.0f} MB; target under {TARGET_S:g} s: {verdict}")


if __name__ == "__main__":
    main()
