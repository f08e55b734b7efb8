"""Mutation fuzzing of every log reader, in process: seeded mutations of the real logs under tests/data (nccl-tests
text and -J JSON, NCCL debug logs, LAMMPS logs, gpuval JSON Lines) go through what `gpuval parse` and `gpuval
import` run: `import_file` (every reader, each document turned into Result records) and, for each document, the
text summary and its JSON. Counts: ok, clean error (a GpuvalError: one line, exit 2), uncaught (must be 0); and the
slowest input per byte, to show no input costs more than linear time.

    python benchmarks/fuzz_readers.py [--seed 11] [--inputs 20000] [--workers 2]

The mutation operators are the review's (shared/reviews/reliability.md section 1): truncation, line deletion,
duplication and shuffling, binary bytes, garbage tokens (NaN, inf, 1e999, 300-digit numbers, unicode, CRLF, rich
markup, YAML breakers, partial footers), number replacement, CR/CRLF endings, unicode, bit flips, splicing two
logs, unicode digits, JSON structure, and stacks of these.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
GARBAGE = ["NaN", "nan", "inf", "-inf", "1e999", "-1e999", "9" * 300, "٣٤", "[/]", "[bold]", "\r\n", "\x00", ": {a",
           "- x", "# Avg bus bandwidth", "# Out of bounds values", "# Collective test starting", "N/A", "|", "'",
           "NCCL INFO Using network", "Loop time of", "Performance:", "{", "[", "\u2028", "\ufeff", "-", "1e-999"]


def corpus() -> list[str]:
    """The seed inputs: every real log in tests/data, a -J document and gpuval's own JSON Lines."""
    texts = [p.read_text(errors="replace") for kind in ("nccl-tests", "nccl-debug", "lammps")
             for p in sorted((DATA / kind).iterdir()) if p.name != "SOURCE.md"]
    texts.append((DATA / "results" / "gpuval-0.1.0-records.jsonl").read_text())
    sys.path.insert(0, str(ROOT / "src"))
    from gpuval.collectives.nccltests_parse import parse_text

    table = parse_text((DATA / "nccl-tests" / "ndv4-1node-allreduce.txt").read_text())[0]
    results = [{**r.to_json(), "root": "    -1", "experiment_name": "all_reduce_perf"} for r in table.rows]
    texts.append(json.dumps({"version": 2, "args": ["all_reduce_perf"], "devices": [{"hostname": "h"}] * 8,
                             "results": results, "out_of_bounds": {"count": 0},
                             "average_bus_bandwidth": {"bandwidth": 78.8923}}, indent=2))
    return texts


def _lines(rng: random.Random, text: str) -> list[str]:
    return text.splitlines(keepends=True) or [text]


def mutate(rng: random.Random, text: str, seeds: list[str]) -> str:
    """One mutation of `text` (sometimes a stack of several)."""
    op = rng.randrange(16)
    lines = _lines(rng, text)
    if op == 0:
        return text[: rng.randrange(len(text) + 1)]
    if op == 1:
        i = rng.randrange(len(lines))
        return "".join(lines[:i] + lines[i + rng.randrange(1, 8):])
    if op == 2:
        i = rng.randrange(len(lines))
        return "".join(lines[:i] + [lines[i]] * rng.randrange(2, 50) + lines[i:])
    if op == 3:
        rng.shuffle(lines)
        return "".join(lines)
    if op == 4:
        at = rng.randrange(len(text) + 1)
        return text[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).decode("latin-1") + text[at:]
    if op in (5, 6):
        tokens = text.split(" ")
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(tokens))
            tokens[i] = rng.choice(GARBAGE) if op == 5 else str(rng.choice([0, -1, 2**64, 10**30, 1.5e308, 7]))
        return " ".join(tokens)
    if op == 7:
        return text.replace("\n", rng.choice(["\r", "\r\n", "\n\r", "\x0b"]))
    if op == 8:
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(["é", "\u202e", "𝟘", "\u00a0", "ﬀ", "\U0001f600"]) * rng.randrange(1, 40) + text[at:]
    if op == 9:
        data = bytearray(text.encode())
        for _ in range(rng.randrange(1, 20)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return data.decode("utf-8", errors="replace")
    if op == 10:
        other = _lines(rng, rng.choice(seeds))
        i, j = rng.randrange(len(lines) + 1), rng.randrange(len(other) + 1)
        return "".join(lines[:i] + other[j:])
    if op == 11:
        return text.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")) if rng.random() < 0.5 else \
            text.translate(str.maketrans("0123456789", "０１２３４５６７８９"))
    if op == 12:
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(["{", "}", "[", "]", '"', ",", "null", "1e400", '{"results":', "[" * 500]) + \
            text[at:]
    if op == 13:
        i = rng.randrange(len(lines))
        return "".join(lines[:i] + [lines[i].rstrip("\n")[: rng.randrange(len(lines[i]) + 1)] + "\n"] + lines[i + 1:])
    if op == 14:
        i = rng.randrange(len(lines))
        token = rng.choice(["9" * rng.randrange(1000, 20000), "x" * rng.randrange(1000, 60000),
                            " " * rng.randrange(1000, 60000)])
        return "".join(lines[:i] + [token + lines[i]] + lines[i + 1:])
    for _ in range(rng.randrange(2, 5)):  # 15: a stack
        text = mutate(rng, text, seeds) if text else text
    return text


def check_one(path: Path) -> tuple[str, str, float]:
    """(outcome, detail, seconds) of one input through import_file (records built, not stored), the text summary
    and the JSON of each document. The seconds are this thread's CPU time: what the input costs the readers, not
    how long a shared machine kept the process waiting (a test's 2-second bound failed on wall time once, at 2.5 s,
    beside the rest of the suite)."""
    from rich.console import Console

    from gpuval.cli.render import summarize
    from gpuval.errors import GpuvalError
    from gpuval.workloads.ingest import Origin, import_file, iter_documents

    start = time.thread_time()
    try:
        found = import_file(path, Origin("fuzz", sku="Standard_ND96asr_v4"))
        if found.error is None and not found.records and not found.skipped:
            return "clean", "nothing", time.thread_time() - start
        console = Console(file=io.StringIO(), width=120)
        for _, doc in iter_documents(path) if found.error is None else []:
            summarize(doc, console)
            json.dumps(doc.to_json(), default=str)
        outcome, detail = ("clean", found.error.split(": ", 1)[-1][:60]) if found.error else ("ok", "")
    except GpuvalError as exc:
        outcome, detail = "clean", str(exc)[:60]
    except Exception as exc:  # what the suite forbids
        outcome, detail = "uncaught", f"{type(exc).__name__}: {exc} {traceback.format_exc(limit=-3)}"
    return outcome, detail, time.thread_time() - start


def run(seed: int, count: int, folder: Path) -> dict:
    """Fuzz `count` inputs from `seed`; returns the counts and the slowest inputs."""
    rng = random.Random(seed)
    seeds = corpus()
    counts: Counter = Counter()
    uncaught: list[str] = []
    slowest: list[tuple[float, int, float]] = []  # (seconds per MB, bytes, seconds) of inputs of 16 KB or more
    longest = 0.0
    for n in range(count):
        text = mutate(rng, rng.choice(seeds), seeds)
        path = folder / f"in-{seed}-{n % 50}"
        path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
        outcome, detail, seconds = check_one(path)
        counts[outcome] += 1
        if outcome == "uncaught":
            uncaught.append(detail)
        size = max(path.stat().st_size, 1)
        if size >= 16384:  # below this the fixed cost of a file (opening, the SKU baseline) is all one measures
            slowest.append((seconds / size * 1e6, size, seconds))
            slowest = sorted(slowest, reverse=True)[:5]
        longest = max(longest, seconds)
    return {"counts": dict(counts), "uncaught": uncaught[:10], "slowest": slowest,
            "max_seconds": longest}


def _worker(args: tuple[int, int]) -> dict:
    seed, count = args
    with tempfile.TemporaryDirectory(prefix="gpuval-fuzz-") as folder:
        return run(seed, count, Path(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--inputs", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    per = args.inputs // args.workers
    start = time.perf_counter()
    with Pool(args.workers) as pool:
        parts = pool.map(_worker, [(args.seed + w, per) for w in range(args.workers)])
    counts: Counter = Counter()
    for part in parts:
        counts.update(part["counts"])
    slow = sorted((s for part in parts for s in part["slowest"]), reverse=True)[:5]
    total = sum(counts.values())
    print(f"{total} mutated inputs in {time.perf_counter() - start:.0f} s ({args.workers} workers, seed {args.seed})")
    print(f"  ok {counts['ok']}, clean error {counts['clean']}, uncaught {counts['uncaught']}")
    for per_mb, size, seconds in slow:
        print(f"  slowest per byte (of inputs >= 16 KB): {size:,} bytes in {seconds * 1000:.1f} CPU-ms = "
              f"{per_mb:.2f} CPU-s per MB")
    slowest = max((p["max_seconds"] for p in parts), default=0.0)
    print(f"  slowest input overall: {slowest * 1000:.1f} CPU-ms")
    for part in parts:
        for line in part["uncaught"]:
            print("  UNCAUGHT", line)
    sys.exit(1 if counts["uncaught"] else 0)


if __name__ == "__main__":
    main()
