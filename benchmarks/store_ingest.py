"""Results store speed: ingest 10,000 nodes x 30 message sizes, then report on a 1,000-node run.

    .venv/bin/python benchmarks/store_ingest.py [--nodes 10000] [--report-nodes 1000]

Prints records/s and seconds for gpuval's ingest (pydantic records -> JSON + metric rows -> SQLAlchemy, one
transaction per 2,000 records, duplicates ignored), and the ratio to a reference measured in the same run: the same
rows, already serialized, inserted by sqlite3's executemany into the same schema in one transaction.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuval.report.build import gather, render_html, render_markdown  # noqa: E402
from gpuval.results.store import _result_row, close_stores, open_store  # noqa: E402
from benchmarks.synthetic_fleet import SIZES, fleet_run  # noqa: E402


def _raw_insert(path: Path, records: list) -> float:
    """Reference: pre-built rows, plain sqlite3 executemany, one transaction, same tables and indexes."""
    results = [_result_row(r) for r in records]
    metrics = [(r.id, i, m.name, m.value, m.unit, m.size_bytes) for r in records for i, m in enumerate(r.metrics)]
    rows = [(d["id"], d["run_id"], d["kind"], d["name"], d["hostname"], d["sku"], d["status"],
             d["started_at"].isoformat(" "), None, d["schema_version"], d["record"]) for d in results]
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    start = time.perf_counter()
    with conn:
        conn.executemany("INSERT INTO gpuval_results VALUES (?,?,?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("INSERT INTO gpuval_metrics VALUES (?,?,?,?,?,?)", metrics)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--report-nodes", type=int, default=1_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpuval-bench-store-"))

    t = time.perf_counter()
    records = fleet_run("ingest", args.nodes, {"node0042": 0.6}, seed=1)
    print(f"generated {len(records)} node records x {len(SIZES)} sizes in {time.perf_counter() - t:.1f} s")

    store = open_store(str(tmp / "gpuval.db"))
    t = time.perf_counter()
    store.add(records)
    ours = time.perf_counter() - t
    open_store(str(tmp / "raw.db"))  # same schema, migrated, then written by plain sqlite3
    close_stores()
    raw = _raw_insert(tmp / "raw.db", records)
    n = len(records)
    print(f"ingest, gpuval store (SQLite):   {ours:6.2f} s  {n / ours:9.0f} records/s  "
          f"{n * len(SIZES) / ours:10.0f} size-rows/s")
    print(f"ingest, raw sqlite3 executemany: {raw:6.2f} s  {n / raw:9.0f} records/s  (reference, same rows)")
    print(f"ratio gpuval / raw: {ours / raw:.2f}x the time")

    store = open_store(str(tmp / "report.db"))
    now = datetime.now(timezone.utc)
    for week in range(3):
        store.add(fleet_run(f"week{week}", args.report_nodes, seed=week, started=now - timedelta(days=21 - 7 * week)))
    store.add(fleet_run("today", args.report_nodes, {"node0007": 0.5, "node0100": 0.9}, seed=9, started=now))
    t = time.perf_counter()
    inp = gather(store, "today")
    gathered = time.perf_counter() - t
    html = render_html(inp)
    md = render_markdown(inp)
    total = time.perf_counter() - t
    flagged = [node.host for node in inp.diagnosis.nodes if node.status.value != "pass"]
    print(f"report, {args.report_nodes} nodes + 3 weeks of history: {total:.2f} s (read + diagnose {gathered:.2f} s), "
          f"HTML {len(html) / 1e6:.1f} MB, Markdown {len(md) / 1e3:.0f} kB; flagged: {', '.join(flagged)}")
    close_stores()
    return 0


if __name__ == "__main__":
    sys.exit(main())
