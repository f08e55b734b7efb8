"""Reading a burst of one Xid, as the xid check does, against a minimal regex reader, in the same run.

A node whose GPU repeats an Xid writes it hundreds of thousands of times (NVIDIA/NVSentinel#1120: ~800K Xid 95
lines). The check's log path reads the saved /dev/kmsg (read_kmsg: records with their times), picks the Xid lines
(xid_lines.xids) and groups them into findings (xid_triage.triage). The floor reads the same file in one piece and
finds the Xids with one compiled regex (finditer over bytes, a count per GPU and code): no times, no findings.

Printed per size: seconds for each, gpuval's time per line, ratio = gpuval / floor. Linear means the time per line
stays flat as the burst grows (the last column: time per line against the smallest size's).

    python benchmarks/xid_burst.py [--lines 100000 200000 400000 800000]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from gpuval.checks.xid_catalog import catalog
from gpuval.checks.xid_triage import Policy, triage
from gpuval.node.kernel_log import read_kmsg
from gpuval.node.xid_lines import xids

LINE = "NVRM: Xid (PCI:0000:{bus:02x}:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"
_FLOOR = re.compile(rb"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def write_burst(path: Path, lines: int) -> None:
    """A saved /dev/kmsg: `lines` Xid 95 records, 1 ms apart, on 8 GPUs in turn, a burst every 100,000 lines."""
    with path.open("w") as out:
        for i in range(lines):
            usec = 3_600_000_000 + i * 1000 + (i // 100_000) * 600_000_000
            out.write(f"3,{i},{usec},-;{LINE.format(bus=i % 8)}\n")


def gpuval_path(path: Path) -> int:
    """The check's log side: records with times, the Xid lines, the findings; the number of findings."""
    return len(triage(xids(read_kmsg(path, None)), Policy(burst_s=60, recur=3), catalog()))


def floor(path: Path) -> int:
    """One regex over the whole file: a count per GPU and code."""
    return len(Counter(m.groups() for m in _FLOOR.finditer(path.read_bytes())))


def timed(func, path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    found = func(path)
    return time.perf_counter() - start, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[100_000, 200_000, 400_000])
    args = parser.parse_args()
    print(f"{'lines':>9} {'gpuval s':>9} {'floor s':>8} {'ratio':>6} {'us/line':>8} {'per-line vs first':>18}")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lines:
            path = Path(tmp) / f"kmsg-{n}"
            write_burst(path, n)
            (ours, found), (base, groups) = timed(gpuval_path, path), timed(floor, path)
            assert found == groups == 8, (found, groups)  # one finding per GPU: 8, however many lines
            per_line = ours / n * 1e6
            first = first or per_line
            print(f"{n:>9} {ours:>9.2f} {base:>8.3f} {ours / base:>6.1f} {per_line:>8.2f} {per_line / first:>18.2f}")


if __name__ == "__main__":
    main()
