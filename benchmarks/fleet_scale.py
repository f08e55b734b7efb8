"""The fleet check's data path at scale: 512 and 4,096 nodes x 8 ranks, and the time ratio (linear is 8).

    .venv/bin/python -m benchmarks.fleet_scale [--nodes 512,4096] [--ranks 8] [--chatter 4] [--browser]

For each fleet size, a whole check runs on a simulated fleet (one slow node, one broken node, one node whose eight
GPUs all compute and copy at 75%; every other node healthy with 2% noise), through gpuval's own code from the jobs'
output on: each round's jobs write their output files as Slurm would (every rank's `start` line, `--chatter` untagged
lines per rank as NCCL_DEBUG would add, the node tests' 17 health records, their GEMM and HBM records with a row per
GPU, and figures, rank 0's samples), then gpuval reads them back (lines.RoundReader over
engines.output.file_lines: streaming), the planner judges the round, the round's records (one per node per test,
plus the health records) go into a SQLite store, and at the end the verdicts are stored and the report of the run
is built (gather: read + diagnose; the context once; HTML and Markdown). Writing the simulated outputs is not
gpuval's work and is not timed. With --browser, headless Chromium opens the largest report and the time to a
rendered page is printed too.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuval.checks.base import CheckResult  # noqa: E402
from gpuval.engines.output import file_lines  # noqa: E402
from gpuval.engines.spec import JobState, JobStatus  # noqa: E402
from gpuval.report.build import prepare, render_html, render_markdown  # noqa: E402
from gpuval.results import Status, Where  # noqa: E402
from gpuval.results.bulk import bulk  # noqa: E402
from gpuval.results.pieces import record_lines  # noqa: E402
from gpuval.results.store import close_stores, open_store  # noqa: E402
from gpuval.fleet.plan import FleetConfig, new_fleet, plan_next, take_round, verdicts  # noqa: E402
from gpuval.fleet.run.lines import JobEnd, RoundReader, line  # noqa: E402
from gpuval.engines.slurm.labels import labelled  # noqa: E402
from gpuval.engines.slurm.hostlist import compress, expand  # noqa: E402
from gpuval.fleet.plan.terms import Round  # noqa: E402
from gpuval.fleet.run.records import Origin, measurement_records, verdict_records  # noqa: E402
from gpuval.fleet.run.driver import round_evidence  # noqa: E402
from gpuval.workloads.health.records import health_record  # noqa: E402

# CPU seconds of this process: the work is single-threaded, and on a shared machine wall time mostly measures the
# neighbours (the ratio is taken from the best of --repeat interleaved runs as well).
clock = time.process_time

NOMINAL = {"node": {"all_reduce": 230.0}, "pair": {"all_reduce": 188.0, "sendrecv": 45.0},
           "group": {"all_reduce": 185.0}}
CHECKS = ("gpu_count", "driver", "xid", "ecc", "row_remap", "clock_throttle", "app_clocks", "persistence",
          "pcie_link", "nvlink", "ib_ports", "ib_rate", "nccl_transport", "topology", "h2d", "d2h", "nccl_allreduce")
PER_GPU = {"gemm_tflops": ("GEMM_SLOW", "TFLOPS", "fp16", 275.0), "hbm_bandwidth": ("HBM_SLOW", "GB/s", "memcpy", 1155.6)}


class Fleet:
    """A simulated fleet: node speeds, one slow, one broken and one GPU-slow node, 2% noise per sample and figure."""

    def __init__(self, n: int, ranks: int, chatter: int, seed: int = 0) -> None:
        self.nodes = [f"gpu{i:05d}" for i in range(n)]
        self.ranks, self.chatter = ranks, chatter
        self.rng = random.Random(seed)
        self.speed = {node: 1.0 for node in self.nodes}
        self.slow, self.broken, self.gpus_slow = self.nodes[n // 3], self.nodes[2 * n // 3], self.nodes[n // 2]
        self.speed[self.slow] = 0.8
        self.where = Where(hostname="h", sku="Standard_ND96asr_v4", gpu_model="NVIDIA A100-SXM4-40GB", gpu_count=8)
        template = health_record(CheckResult("x", Status.PASS, "X", 1.0, 1.0, "", "within limits"), self.where, "run",
                                 _now())
        self.health = template.model_dump(mode="json")

    def _per_gpu(self, node: str, name: str) -> dict:
        """One per-GPU health record of a node (a row per GPU, as checks.figures.gpu_row writes it)."""
        code, unit, key, nominal = PER_GPU[name]
        factor = 0.75 if node == self.gpus_slow else 1.0
        rows = [{"index": i, "bus_id": f"0000000{i}:00:00.0", "gpu": f"GPU {i} (0000000{i}:00:00.0)",
                 key: round(nominal * factor * (1 + self.rng.gauss(0, 0.02)), 1)} for i in range(8)]
        check = CheckResult(name, Status.PASS, code, rows[0][key], None, unit, "within its peers", {"gpus": rows})
        return health_record(check, self.where, "run", _now()).model_dump(mode="json")

    def _chatter(self, node: str, rank: int) -> Iterator[str]:
        for k in range(self.chatter):
            yield f"{node}:{1000 + rank}:{1000 + rank} [{rank}] NCCL INFO Channel {k:02d}/24 : 0[0] -> 1[1] via P2P/IPC\n"

    def job_output(self, index: int, test_kind: str, test_id: str, nodes: tuple[str, ...], samples: int,
                   fh: "object", first_task: int = 0) -> None:
        """What one test's job writes (several node tests share one job's file, as on Slurm), every line labelled
        with its task as srun --label writes it; tasks laid out node by node in Slurm's host list order."""
        write = fh.write  # type: ignore[attr-defined]
        tagged = {} if test_kind == "node" else {"test": test_id}
        order = expand(compress(nodes))
        ranks = 1 if test_kind == "node" else self.ranks
        for r in range(len(order) * ranks):
            node = order[r // ranks]
            write(f"{first_task + r}: " + line("start", round=index, node=node, rank=r, **tagged) + "\n")
            for text in self._chatter(node, r):
                write(text)
        label = f"{first_task}: "
        if test_kind == "node":
            node = nodes[0]
            for name in CHECKS:
                doc = dict(self.health, name=name, id=f"{index}-{node}-{name}")
                write(label + line("health", round=index, node=node, record=doc) + "\n")
            for name in PER_GPU:  # longer than a launcher's message: written in pieces, as emit writes them
                for piece in record_lines(line("health", round=index, node=node, record=self._per_gpu(node, name))
                                          + "\n", f"{index}-{node}-{name}"):
                    write(label + piece)
            write(label + line("suite", round=index, node=node, status="pass", reason="17 checks pass") + "\n")
        if self.broken in nodes and test_kind != "node":
            write(f"{order.index(self.broken) * ranks}: " + line("error", round=index, node=self.broken, rank=0,
                                                                 error="connection reset by peer", **tagged) + "\n")
            return
        speed = min(self.speed[n] for n in nodes) if test_kind != "node" else 1.0
        for coll, nominal in NOMINAL[test_kind].items():
            figures = [nominal * speed * (1 + self.rng.gauss(0, 0.02)) for _ in range(samples)]
            write(label + line("samples", round=index, node=order[0], collective=coll, busbw=figures,
                               hosts=[n for n in order for _ in range(ranks)], ranks=len(order) * ranks,
                               **tagged) + "\n")


def _now():  # type: ignore[no-untyped-def]
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def write_round(fleet: Fleet, rnd: Round, folder: Path) -> list[tuple[Path, list[str]]]:
    """The round's output files, one per job (node tests together, each pair or group alone), each with the node
    of each task (what engines.slurm.labels reads srun's labels with)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    node_file = folder / f"r{rnd.index}-nodes.out"
    node_tests = [t for t in rnd.tests if t.kind == "node"]
    with open(node_file, "w") as nodes_out:
        for task, t in enumerate(node_tests):
            fleet.job_output(rnd.index, "node", t.id, t.nodes, t.samples, nodes_out, first_task=task)
    files.append((node_file, [t.nodes[0] for t in node_tests]))
    for t in rnd.tests:
        if t.kind != "node":
            path = folder / f"{t.id}.out"
            with open(path, "w") as out:
                fleet.job_output(rnd.index, t.kind, t.id, t.nodes, t.samples, out)
            files.append((path, [n for n in expand(compress(t.nodes)) for _ in range(fleet.ranks)]))
    return files


def run(n: int, ranks: int, chatter: int, work: Path) -> dict[str, float]:
    """One whole simulated check of `n` nodes; seconds per stage of gpuval's own work."""
    fleet = Fleet(n, ranks, chatter)
    db = f"sqlite:///{work / f'fleet{n}.db'}"
    store = open_store(db)
    run_id = f"fleet-{n}"
    state = new_fleet(fleet.nodes, FleetConfig(seed=1))
    spent = {"read outputs": 0.0, "plan + judge": 0.0, "build records": 0.0, "store": 0.0, "report": 0.0}
    out_bytes = 0
    done = JobEnd(JobStatus(job_id="1", engine="slurm", state=JobState.SUCCEEDED))
    while True:
        t = clock()
        with bulk():  # as FleetRun.check does
            rnd = plan_next(state)
        spent["plan + judge"] += clock() - t
        if rnd is None:
            break
        files = write_round(fleet, rnd, work / f"out{n}")
        out_bytes += sum(f.stat().st_size for f, _ in files)
        t = clock()
        reader = RoundReader(rnd)
        for path, tasks in files:
            reader.feed(labelled(file_lines(path), tasks))
        with bulk():  # as FleetRun.run_round does
            results = [reader.result(test, done) for test in rnd.tests]
        spent["read outputs"] += clock() - t
        t = clock()
        with bulk():  # as FleetRun.check does
            take_round(state, rnd, results)
        spent["plan + judge"] += clock() - t
        t = clock()
        with bulk():  # as FleetRun._store does
            evidence = round_evidence(state, rnd)
            records = []
            for test, result in zip(rnd.tests, results):
                got = reader.collected[test.id]
                for h in got.health:
                    h.run_id = run_id
                records += got.health
                records += measurement_records(test, result, evidence.get(test.id), size=8 * 1024**3,
                                               origin=Origin(run_id=run_id, engine="slurm", ranks=got.ranks))
        spent["build records"] += clock() - t
        t = clock()
        with bulk():
            store.add(records)
        spent["store"] += clock() - t
        for f, _ in files:
            f.unlink()
    t = clock()
    with bulk():
        found = verdicts(state)
    spent["plan + judge"] += clock() - t
    t = clock()
    with bulk():
        final = list(verdict_records(found, run_id, "slurm"))
    spent["build records"] += clock() - t
    t = clock()
    with bulk():
        store.add(final)
    spent["store"] += clock() - t
    t = clock()
    inp, ctx = prepare(store, run_id)  # as `gpuval report` does
    html = render_html(inp, ctx)
    md = render_markdown(inp, ctx)
    spent["report"] += clock() - t
    report = work / f"report{n}.html"
    report.write_text(html)
    (work / f"report{n}.md").write_text(md)
    failed = sorted(v.subject for v in found.nodes.values() if v.status is Status.FAIL)
    spent["_rounds"] = found.rounds
    spent["_output_mb"] = out_bytes / 1e6
    spent["_html_mb"] = len(html) / 1e6
    spent["_found"] = failed == sorted([fleet.slow, fleet.broken, fleet.gpus_slow])  # type: ignore[assignment]
    close_stores()
    return spent


def open_in_browser(report: Path, work: Path) -> float:
    """Seconds for headless Chromium to load and paint the page (a screenshot taken)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    t = time.perf_counter()
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={work / 'profile'}", "--proxy-server=127.0.0.1:9",
                    f"--screenshot={work / 'shot.png'}", "--window-size=1200,2000", report.as_uri()],
                   capture_output=True, timeout=600, check=True)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="512,4096")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--chatter", type=int, default=4, help="untagged lines per rank per job")
    parser.add_argument("--browser", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per size; the best of each stage")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(x) for x in args.nodes.split(",")]
    with tempfile.TemporaryDirectory(prefix="gpuval-fleet-scale-") as tmp:
        work = Path(tmp)
        runs: dict[int, dict[str, float]] = {}
        for _ in range(args.repeat):
            for n in sizes:  # interleaved, so a busy spell of the machine hits both sizes
                got = run(n, args.ranks, args.chatter, work)
                runs[n] = {k: min(v, runs[n][k]) if n in runs and not k.startswith("_") else v
                           for k, v in got.items()}
        if args.browser:
            for n in sizes:
                runs[n]["_browser_s"] = open_in_browser(work / f"report{n}.html", work)
    if args.json:
        print(json.dumps(runs, indent=2))
        return
    small, large = sizes[0], sizes[-1]
    print(f"fleet check data path, {args.ranks} ranks per node ({args.chatter} untagged lines per rank per job); CPU "
          f"seconds, best of {args.repeat}; ratio {large}/{small} nodes (linear: {large / small:g})")
    print(f"{'stage':16} {small:>10} {large:>10} {'ratio':>7}")
    for stage in [k for k in runs[small] if not k.startswith("_")] + ["total"]:
        a = sum(v for k, v in runs[small].items() if not k.startswith("_")) if stage == "total" else runs[small][stage]
        b = sum(v for k, v in runs[large].items() if not k.startswith("_")) if stage == "total" else runs[large][stage]
        print(f"{stage:16} {a:9.2f}s {b:9.2f}s {b / a if a else float('nan'):7.2f}")
    for key in ("_rounds", "_output_mb", "_html_mb", "_found", "_browser_s"):
        if key in runs[small]:
            print(f"{key[1:]:16} {runs[small][key]!s:>10} {runs[large][key]!s:>10}")


if __name__ == "__main__":
    main()
