"""How long `gpuval health --quick` takes, against the floors it cannot beat, in one run: Slurm kills a
HealthCheckProgram after 60 s, and the docs' wrapper gives gpuval 50.

Interleaved rounds (floor, floor, gpuval, gpuval, ...) so load from elsewhere on the machine hits all alike; each
a fresh process, as slurmd starts it:

- `python -c pass`: the interpreter alone;
- the read floor: a bare Python script that reads what the quick checks read and nothing else: NVML (init, every
  GPU's ECC counters, clocks, throttle reasons, PCIe link, NVLink states, row remapping), the InfiniBand ports in
  sysfs, the kernel log (/dev/kmsg) and the node's kept full result; no gpuval import;
- `gpuval health --quick` on this machine, and on each recorded machine (`--recorded`, judged from its recording:
  the checks' own code on a GPU node's figures, NVML not asked), each folding in a kept full result.

Prints the median, min and max of each in seconds, and gpuval's median over the read floor's. Nothing leaves the
machine: IMDS is pointed at a closed port on 127.0.0.1 (off Azure, an unreachable IMDS costs up to its 1 s timeout;
give --sku or GPUVAL_SKU to skip it).

    python benchmarks/health_quick.py [--rounds 7] [--recorded Standard_ND96asr_v4,Standard_ND96isr_H100_v5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the quick checks read, read bare (one process, no gpuval): the floor gpuval's --quick is measured against.
READ_FLOOR = r'''
import glob, json, os, sys
state = sys.argv[1]
try:
    import pynvml
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for call, args in ((pynvml.nvmlDeviceGetName, ()), (pynvml.nvmlDeviceGetPciInfo, ()),
                           (pynvml.nvmlDeviceGetTotalEccErrors, (1, 0)), (pynvml.nvmlDeviceGetClockInfo, (1,)),
                           (pynvml.nvmlDeviceGetApplicationsClock, (1,)), (pynvml.nvmlDeviceGetMaxClockInfo, (1,)),
                           (pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, ()),
                           (pynvml.nvmlDeviceGetCurrPcieLinkWidth, ()), (pynvml.nvmlDeviceGetMaxPcieLinkWidth, ()),
                           (pynvml.nvmlDeviceGetPersistenceMode, ()), (pynvml.nvmlDeviceGetRemappedRows, ())):
            try:
                call(h, *args)
            except pynvml.NVMLError:
                pass
        for link in range(18):
            try:
                pynvml.nvmlDeviceGetNvLinkState(h, link)
            except pynvml.NVMLError:
                break
    pynvml.nvmlShutdown()
except Exception:
    pass  # no driver here: the floor is what it costs to find that out
for port in glob.glob("/sys/class/infiniband/*/ports/*"):
    for name in ("state", "phys_state", "rate", "link_layer"):
        try:
            open(os.path.join(port, name)).read()
        except OSError:
            pass
try:
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                if not os.read(fd, 8192):
                    break
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != 32:
                    break
    finally:
        os.close(fd)
except OSError:
    pass
try:
    json.load(open(state))
except OSError:
    pass
'''


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # 1: a check failed; 2 with a verdict: nothing judged (no GPU here). Both are complete quick runs; a 2 without
    # a verdict is a refusal (bad input), no run to time.
    if proc.returncode not in (0, 1) and not (proc.returncode == 2 and "verdict:" in proc.stdout):
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()[:400]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _keep_full_results(recorded: list[str], env: dict[str, str]) -> None:
    """A full run per recorded machine (its node named after it) keeps the result --quick folds in."""
    for name in recorded:
        subprocess.run([sys.executable, "-m", "gpuval", "health", "--recorded", name, "--node", name,
                        "--results", os.devnull], env=env, stdout=subprocess.DEVNULL, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--recorded", default="Standard_ND96asr_v4,Standard_ND96isr_H100_v5")
    args = parser.parse_args()
    recorded = [r for r in args.recorded.split(",") if r]
    with tempfile.TemporaryDirectory(prefix="gpuval-quick-") as tmp:
        env = dict(os.environ, GPUVAL_STATE_DIR=tmp, GPUVAL_IMDS_ENDPOINT="http://127.0.0.1:9/metadata",
                   GPUVAL_DB="none", XDG_DATA_HOME=tmp)
        env.pop("GPUVAL_SKU", None)
        _keep_full_results(recorded, env)
        gpuval = [sys.executable, "-m", "gpuval", "health", "--quick"]
        cases: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "read floor (NVML, IB sysfs, /dev/kmsg, kept result)": [
                sys.executable, "-c", READ_FLOOR, str(Path(tmp) / "last-full" / f"{recorded[0]}.json")],
            "gpuval health --quick (this machine)": gpuval,
            **{f"gpuval health --quick --recorded {name}": [*gpuval, "--recorded", name, "--node", name]
               for name in recorded},
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, argv in cases.items():
                times[name].append(_time(argv, env))
    print(f"# {platform.node()}: {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}, {args.rounds} rounds, seconds per fresh process")
    width = max(map(len, times))
    print(f"{'case':{width}}  wall: median    min    max   CPU: median")
    for name, values in times.items():
        wall = [w for w, _ in values]
        print(f"{name:{width}}        {statistics.median(wall):6.3f} {min(wall):6.3f} {max(wall):6.3f}"
              f"        {statistics.median(c for _, c in values):6.3f}")
    floor = statistics.median(w for w, _ in times["read floor (NVML, IB sysfs, /dev/kmsg, kept result)"])
    worst = max(statistics.median(w for w, _ in v) for k, v in times.items() if k.startswith("gpuval"))
    print(f"slowest gpuval --quick median: {worst:.3f} s wall = read floor + {worst - floor:.3f} s; "
          "Slurm's limit: 60 s")


if __name__ == "__main__":
    main()
