"""The results store on a SQLite file and on a real PostgreSQL server: round trip, idempotence, migrations,
refusal of foreign, corrupt and newer databases, and many writers at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.results import read_results, save_results
from gpuval.results.query import Query, parse_when
from gpuval.results.store import StoreError, open_store
from benchmarks.synthetic_fleet import fleet_run
from tests.conftest import ROOT, run_gpuval

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=timezone.utc)
# A process that saves one run (run-ARG2, 5 nodes) into the store at ARG1, then says whether it imported alembic.
WRITER = ("import sys; from benchmarks.synthetic_fleet import fleet_run; from gpuval.results.store import open_store\n"
          "open_store(sys.argv[1]).add(fleet_run('run-' + sys.argv[2], 5))\nprint('ALEMBIC', 'alembic' in sys.modules)")


def test_round_trip_runs_and_metrics(db_url: str):
    store = open_store(db_url)
    first = fleet_run("run-a", 4, seed=1, started=NOW - timedelta(days=2))
    second = fleet_run("run-b", 3, {"node0002": 0.5}, seed=2, started=NOW)
    store.add(first)
    store.add(second)
    store.add(second)  # the same records again: kept once

    back = store.results(Query(run_ids=["run-b"]))
    assert [r.id for r in back] == [r.id for r in second]
    assert back[1].data.results == second[1].data.results
    assert back[0].started_at == second[0].started_at

    runs = store.runs(Query())
    assert [r.run_id for r in runs] == ["run-b", "run-a"]
    assert (runs[0].records, runs[0].hosts, runs[0].kinds, runs[0].skus) == (3, 3, ["collective"],
                                                                                ["Standard_ND96asr_v4"])
    assert store.runs(Query(hosts=["node0004"]))[0].run_id == "run-a"
    assert store.runs(Query(since=NOW - timedelta(hours=1)))[0].run_id == "run-b"
    assert len(store.runs(Query(since=NOW - timedelta(hours=1)))) == 1

    points = store.metric_points(Query(hosts=["node0002"]), ["busbw"])
    assert [p.run_id for p in points] == ["run-a", "run-b"]
    assert points[1].value == pytest.approx(second[1].metric("busbw").value)
    assert points[1].size_bytes == 4 * 1024**3


def test_save_results_writes_log_and_store(db_url: str, tmp_path: Path):
    records = fleet_run("run-s", 2, started=NOW)
    log = save_results(records, tmp_path / "r.jsonl", db=db_url)
    assert [r.id for r in read_results(log)] == [r.id for r in records]
    assert [r.id for r in open_store(db_url).results(Query())] == [r.id for r in records]


def test_store_unreachable_keeps_the_log_and_import_brings_it_in(tmp_path: Path, capfd: pytest.CaptureFixture):
    records = fleet_run("run-offline", 2, started=NOW)
    dead = "postgresql://gpuval@127.0.0.1:9/none"  # nothing listens on port 9
    log = save_results(records, tmp_path / "r.jsonl", db=dead)
    err = capfd.readouterr().err
    assert "not in the results database" in err and f"gpuval import {log}" in err
    assert len(read_results(log)) == 2

    db = tmp_path / "later.db"
    proc = run_gpuval("import", str(log), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "stored 2 records" in proc.stdout
    run_gpuval("import", str(log), "--db", str(db))  # twice: still one copy
    assert len(open_store(str(db)).results(Query())) == 2


def test_corrupt_file_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "results.db"
    bad.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(StoreError, match="is not a SQLite database"):
        open_store(str(bad))
    proc = run_gpuval("history", "--db", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is not a SQLite database" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_foreign_sqlite_database_is_refused(tmp_path: Path):
    other = tmp_path / "places.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE moz_places (id INTEGER PRIMARY KEY, url TEXT)")
    with pytest.raises(StoreError, match="not a gpuval results database.*moz_places"):
        open_store(str(other))
    with sqlite3.connect(other) as conn:  # untouched
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["moz_places"]


def test_database_from_a_newer_gpuval_is_refused(db_url: str):
    import sqlalchemy as sa

    from gpuval.results.store import close_stores
    from gpuval.results.dsn import normalize_url

    open_store(db_url).add(fleet_run("run-n", 1, started=NOW))
    close_stores()
    engine = sa.create_engine(normalize_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE gpuval_schema_version SET version_num = '0042'"))
    engine.dispose()
    with pytest.raises(StoreError, match="written by a newer gpuval \\(schema revision 0042\\)"):
        open_store(db_url)


def test_the_shipped_revisions_are_alembics_and_a_store_at_head_opens_without_it(tmp_path: Path):
    """HEAD and KNOWN, which let a store already at the newest revision open without importing alembic, are what
    alembic itself reads from migrations/versions; a fresh store is migrated by alembic, a second process opening
    it (and saving into it) never imports alembic."""
    from gpuval.results.store_migrate import HEAD, KNOWN, script_directory

    script = script_directory()
    assert HEAD == script.get_current_head() and KNOWN == {rev.revision for rev in script.walk_revisions()}
    db = str(tmp_path / "r.db")
    runs = [subprocess.run([sys.executable, "-c", WRITER, db, str(n)], capture_output=True, text=True, timeout=60,
                           cwd=ROOT) for n in range(2)]
    assert [r.stdout.strip() for r in runs] == ["ALEMBIC True", "ALEMBIC False"], [r.stderr for r in runs]
    assert sqlite3.connect(db).execute("SELECT version_num FROM gpuval_schema_version").fetchall() == [(HEAD,)]


def test_bad_url_and_unknown_backend(tmp_path: Path):
    with pytest.raises(StoreError, match="SQLite or PostgreSQL, not mysql"):
        open_store("mysql://u@127.0.0.1/db")
    with pytest.raises(StoreError, match="is a folder"):
        open_store(str(tmp_path))


def test_parse_when():
    now = datetime(2025, 6, 8, tzinfo=timezone.utc)
    assert parse_when("7d", now) == datetime(2025, 6, 1, tzinfo=timezone.utc)
    assert parse_when("2025-06-01", now) == datetime(2025, 6, 1, tzinfo=timezone.utc)
    with pytest.raises(Exception, match="bad time 'yesterday'"):
        parse_when("yesterday", now)


_WRITER = """
import sys
from benchmarks.synthetic_fleet import fleet_run
from gpuval.results import save_results
from pathlib import Path
worker, url, log = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
records = fleet_run(f"run-w", 400, seed=worker)
for i, record in enumerate(records):
    record.where.hostname = f"w{worker}-{i:04d}"
    record.data = type(record.data)()  # an empty sweep: the smallest record of its kind
    save_results([record], log, db=url)  # one record per write: the worst case for locking
print("done", worker)
"""


def test_eight_writers_lose_nothing(db_url: str, tmp_path: Path):
    log = tmp_path / "shared.jsonl"
    open_store(db_url)  # the schema exists before the writers race (they also race to create it in the next test)
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(w), db_url, str(log)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(8)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0 and "warning" not in err, err
    stored = open_store(db_url).results(Query(run_ids=["run-w"]))
    assert len(stored) == 3200
    assert len({r.where.hostname for r in stored}) == 3200
    lines = log.read_text().splitlines()
    assert len(lines) == 3200 and all(json.loads(line)["run_id"] == "run-w" for line in lines)


def test_writers_racing_to_create_the_database(tmp_path: Path):
    url = str(tmp_path / "new" / "results.db")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, str(w)], cwd=ROOT, stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True) for w in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert len(open_store(url).runs(Query())) == 4


def test_rows_after_gives_only_the_rows_stored_since(db_url: str):
    """What the exporter reads on each scrape: the rows after the last one it read (both backends)."""
    store = open_store(db_url)
    store.add(fleet_run("run-1", 2, started=NOW))
    first = store.rows_after(0)
    assert len(first) == 2 and all(json.loads(text)["run_id"] == "run-1" for _, text in first)
    cursor = max(n for n, _ in first)
    store.add(fleet_run("run-2", 1, started=NOW))
    new = [json.loads(text)["run_id"] for n, text in store.rows_after(cursor) if n > cursor]
    assert new == ["run-2"]
