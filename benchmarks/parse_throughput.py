"""Parsing throughput and memory of `gpuval parse` / `import` against a minimal regex reader, in the same run.

Generated logs (the review's, shared/reviews/performance.md section 4): many nccl-tests outputs concatenated (8 ranks,
30 sizes each), a 512-rank NCCL_DEBUG=INFO stream interleaved with its table, and a 4,096-host NCCL INFO stream.
Each goes through `iter_documents` (all three readers, one pass, what parse and import run) and through the floor: 4
compiled regexes with finditer over the whole text (rows, `Using network`, hosts into a dict, nranks). Ratio =
gpuval / floor, to be at most 3. Peak memory of a child process that parses the file (ru_maxrss), at two sizes: it
must not grow with the file.

    python benchmarks/parse_throughput.py [--mb 50] [--big-mb 200]
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROW = "{size:>12d}  {count:>12d}     float     sum      -1  {t:>7.2f}  {a:>6.2f}  {b:>6.2f}       0  {t:>7.2f}  {a:>6.2f}  {b:>6.2f}       0\n"


def _test(rng: random.Random, ranks: int, hosts: list[str]) -> str:
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0\n", "#\n", "# Using devices\n"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on {hosts[r // 8]:>10s} device {r % 8:2d} [0x{r:02x}] "
              f"NVIDIA H100 80GB HBM3\n" for r in range(ranks)]
    lines += ["#\n", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong\n", "#        (B)    (elements)                               (us)  (GB/s)  "
              "(GB/s)            (us)  (GB/s)  (GB/s)\n"]
    for k in range(30):
        size = 8 << k
        t = 10 + size / 2e5 * rng.uniform(0.9, 1.1)
        lines.append(ROW.format(size=size, count=size // 4, t=t, a=size / t / 1e3, b=size / t / 1e3 * 1.75))
    lines += ["# Out of bounds values : 0 OK\n", "# Avg bus bandwidth    : 97.1234 \n", "#\n"]
    return "".join(lines)


def _info(rng: random.Random, host: str, rank: int, nranks: int) -> list[str]:
    who = f"{host}:{5000 + rank}:{5100 + rank} [{rank % 8}] NCCL INFO"
    lines = [f"{who} Bootstrap : Using eth0:10.0.0.{rank % 250}<0>\n", f"{who} NET/IB : Using [0]mlx5_0:1/IB "
             f"[1]mlx5_1:1/IB [RO]; OOB eth0:10.0.0.1<0>\n", f"{who} Using network IB\n",
             f"{who} comm 0x5555 rank {rank} nranks {nranks} cudaDev {rank % 8} busId 1b000 - Init START\n"]
    for ch in range(rng.randrange(20, 40)):
        peer = (rank + 1) % nranks
        path = "P2P/IPC/read" if peer // 8 == rank // 8 else f"NET/IB/{ch % 8}/GDRDMA"
        lines.append(f"{who} Channel {ch:02d}/0 : {rank}[{rank % 8}] -> {peer}[{peer % 8}] via {path}\n")
    return lines


def generate(kind: str, target: int, path: Path) -> None:
    """Write a log of about `target` bytes of one kind: tests, nccl512 (INFO + table), nccl4096 (INFO only)."""
    rng = random.Random(7)
    with path.open("w") as fh:
        written = 0
        while written < target:
            if kind == "tests":
                chunk = _test(rng, 8, ["node-a"])
            else:
                nodes = 64 if kind == "nccl512" else 4096
                hosts = [f"node-{rng.randrange(10**6):06d}-{i}" for i in range(nodes)]
                ranks = nodes * 8
                info = [line for r in range(ranks) for line in _info(rng, hosts[r // 8], r, ranks)]
                rng.shuffle(info)
                chunk = "".join(info) + (_test(rng, ranks, hosts) if kind == "nccl512" else "")
            fh.write(chunk)
            written += len(chunk)


_FLOOR = [re.compile(rb"^ *(\d+) +(\d+) +\w+ +\w+ +-?\d+ +([\d.]+) +([\d.]+) +([\d.]+)", re.M),
          re.compile(rb"NCCL INFO Using network (\S+)"), re.compile(rb"^([\w.-]+):\d+:\d+ \[\d+\] NCCL", re.M),
          re.compile(rb"nranks (\d+)")]


def floor(path: Path) -> float:
    """The minimal regex reader: rows, networks, hosts (a dict), nranks; seconds."""
    start = time.perf_counter()
    data = path.read_bytes()
    rows = [m.groups() for m in _FLOOR[0].finditer(data)]
    nets = [m.group(1) for m in _FLOOR[1].finditer(data)]
    hosts = dict.fromkeys(m.group(1) for m in _FLOOR[2].finditer(data))
    nranks = max((int(m.group(1)) for m in _FLOOR[3].finditer(data)), default=0)
    assert rows or nets or hosts or nranks
    return time.perf_counter() - start


def gpuval(path: Path) -> tuple[float, int]:
    """gpuval's one pass over the file (all readers, documents as they come); seconds and documents."""
    from gpuval.workloads.ingest import iter_documents

    start = time.perf_counter()
    docs = sum(1 for _ in iter_documents(path))
    return time.perf_counter() - start, docs


def peak_rss_mb(path: Path, command: str) -> float:
    """Peak resident memory (MB, VmHWM: ru_maxrss would carry the parent's over exec) of a fresh process that runs
    `command` on the file: parse (documents only), json (what `gpuval parse --json` prints, to /dev/null) or import
    (into a SQLite file)."""
    code = ("import sys, resource\nfrom pathlib import Path\n"
            "from gpuval.workloads.ingest import iter_documents, import_file, Origin\n"
            "p = Path(sys.argv[1])\n"
            "if sys.argv[2] == 'parse':\n    sum(1 for _ in iter_documents(p))\n"
            "elif sys.argv[2] == 'json':\n    from gpuval.cli.parse import _print_json_array\n"
            "    sys.stdout = open('/dev/null', 'w'); _print_json_array([p])\n"
            "else:\n    from gpuval.results.store import open_store\n    import tempfile\n"
            "    d = tempfile.mkdtemp(); s = open_store(d + '/r.db')\n"
            "    import_file(p, Origin('bench'), sink=s.add)\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print(hwm, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path), command], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--big-mb", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuval-parse-") as tmp:
        print(f"{'log':10s} {'MB':>6s} {'gpuval s':>9s} {'MB/s':>6s} {'floor s':>8s} {'ratio':>6s} {'docs':>6s}")
        worst = 0.0
        for kind in ("tests", "nccl512", "nccl4096"):
            path = Path(tmp) / f"{kind}.log"
            generate(kind, args.mb * 1024**2, path)
            size = path.stat().st_size / 1024**2
            runs = [(gpuval(path), floor(path)) for _ in range(3)]  # alternated: the machine's load hits both
            ours, docs = min(r[0][0] for r in runs), runs[0][0][1]
            base = min(r[1] for r in runs)
            worst = max(worst, ours / base)
            print(f"{kind:10s} {size:6.0f} {ours:9.2f} {size / ours:6.1f} {base:8.2f} {ours / base:6.2f} {docs:6d}")
        print(f"worst ratio gpuval/floor: {worst:.2f} (target <= 3)")
        for kind in ("tests", "nccl512"):
            small, big = Path(tmp) / f"{kind}.log", Path(tmp) / f"{kind}-big.log"
            generate(kind, args.big_mb * 1024**2, big)
            for command in ("parse", "json", "import") if kind == "tests" else ("parse", "import"):
                a, b = peak_rss_mb(small, command), peak_rss_mb(big, command)
                print(f"peak RSS {kind} {command:6s}: {a:6.0f} MB at {small.stat().st_size / 1024**2:.0f} MB, "
                      f"{b:6.0f} MB at {big.stat().st_size / 1024**2:.0f} MB")
            big.unlink()
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
