"""`gpuval exporter`'s input: values beyond a float are clamped, bad store rows are skipped and counted, the store
is read from where it stopped; a record dated in the future hides no later run, hosts are bounded, and the latest
run of each host is found in linear time (THE latest-run rule, `prometheus.LatestRuns`). How the JSON Lines file is
read (torn lines, rotation, copytruncate, FIFOs) is tests/results/test_sink.py; the HTTP side is
test_exporter_server.py. `--once` runs the real command line."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.operate.prometheus import MAX_NAMES, LatestRuns, latest
from gpuval.results import save_results
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.records import record
from tests.operate.support import counter, node_status, samples

SKIPPED = "gpuval_exporter_skipped_records"


def test_huge_nan_and_infinite_values_are_clamped_not_a_crash(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    line = json.loads(record(Status.FAIL, run="r1", value=0, details={"gpus": []}).model_dump_json())
    line["data"]["details"]["gpus"] = [{"index": 0, "bus_id": "0000:01:00.0", "gpu_ecc": 10**400},
                                       {"index": 1, "bus_id": "0000:02:00.0", "gpu_ecc": -(10**400)}]  # an import
    other = json.loads(record(Status.FAIL, run="r1", host="n2", value=0).model_dump_json())
    other["metrics"][0]["value"] = float("nan")  # json.dumps writes NaN, as Python programs do
    results.write_text(json.dumps(line) + "\n" + json.dumps(other) + "\n")
    proc = run_gpuval("exporter", "--results", str(results), "--once")
    assert proc.returncode == 0, proc.stderr
    values = {(s.labels["host"], s.labels["metric"], s.labels["gpu"]): s.value
              for s in samples(proc.stdout)["gpuval_check_value"]}
    assert values[("n1", "gpu_ecc", "0")] == float("inf") and values[("n1", "gpu_ecc", "1")] == float("-inf")
    assert values[("n2", "ecc", "")] != values[("n2", "ecc", "")]  # NaN, as the exposition format writes it


def test_a_bad_store_row_is_skipped_and_counted(tmp_path: Path):
    db = tmp_path / "fleet.db"
    save_results([record(Status.PASS, run="r-a", host="a"), record(Status.FAIL, run="r-b", host="b")],
                 tmp_path / "r.jsonl", db=f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:  # a row another program (or a damaged import) wrote
        conn.execute("UPDATE gpuval_results SET record = '{\"torn' WHERE hostname = 'a'")
    proc = run_gpuval("exporter", "--db", f"sqlite:///{db}", "--once")
    assert proc.returncode == 0, proc.stderr
    assert node_status(proc.stdout, "b") == "fail" and counter(proc.stdout, SKIPPED) == 1.0


def test_the_store_is_read_from_the_last_row(tmp_path: Path):
    from gpuval.operate.exporter import StoreSource

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    save_results([record(Status.PASS, run="r-a", host="a")], tmp_path / "r.jsonl", db=url)
    source = StoreSource(url, refresh_s=0)
    assert [r.run_id for r in source.read()] == ["r-a"]
    first = source.cursor
    save_results([record(Status.FAIL, run="r-b", host="b")], tmp_path / "r.jsonl", db=url)
    assert [r.run_id for r in source.read()] == ["r-b"] and source.cursor > first  # only the new row


def test_a_store_longer_than_a_batch_is_read_whole_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from gpuval.operate import exporter as module
    from gpuval.results.store import open_store

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    open_store(url).add([record(Status.PASS, run=f"r{i}", host=f"h{i}") for i in range(250)])
    monkeypatch.setattr(module, "BATCH", 100)
    source = module.StoreSource(url, refresh_s=0)
    assert len({r.where.hostname for r in source.read()}) == 250 and source.cursor == 250


def test_a_record_dated_in_the_future_hides_no_later_run():
    """A node printed a PASS of host a1 dated 2099; two real FAIL runs of a1 follow, 5 minutes ago and now. The
    exporter kept the newest run by its own date and served the forged PASS for good (reliability review D4):
    now a record dated beyond now plus the clock-skew allowance is refused and counted."""
    now = datetime.now(timezone.utc)
    forged = record(Status.PASS, run="forged", host="a1", at=datetime(2099, 1, 1, tzinfo=timezone.utc))
    runs = LatestRuns()
    runs.add([forged, record(Status.FAIL, run="fail-1", host="a1", at=now - timedelta(minutes=5)),
              record(Status.FAIL, run="fail-2", host="a1", at=now)])
    assert [r.run_id for r in runs.records()] == ["fail-2"] and runs.future == 1
    fast = record(Status.WARN, run="fast-clock", host="a1", at=now + timedelta(minutes=1))  # within the allowance
    runs.add([fast])
    assert [r.run_id for r in runs.records()] == ["fast-clock"]


def test_the_exporter_serves_the_fail_after_a_forged_future_pass(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    now = datetime.now(timezone.utc)
    save_results([record(Status.PASS, run="forged", host="a1", at=datetime(2099, 1, 1, tzinfo=timezone.utc)),
                  record(Status.FAIL, run="fail-1", host="a1", at=now - timedelta(minutes=5)),
                  record(Status.FAIL, run="fail-2", host="a1", at=now)], results, db="none")
    proc = run_gpuval("exporter", "--results", str(results), "--once")
    assert proc.returncode == 0, proc.stderr
    assert node_status(proc.stdout, "a1") == "fail"
    assert [s.labels["run_id"] for s in samples(proc.stdout)["gpuval_run_info"]] == ["fail-2"]
    assert counter(proc.stdout, "gpuval_exporter_future_records") == 1.0


def test_the_latest_run_rule_is_linear():
    """A host's newest run of N records, then N older one-record runs: the old rule took a max over the kept run
    for every record (51 s at N = 5,000, reliability review D12 a); each record is now looked at once."""
    n = 5000
    now = datetime.now(timezone.utc)
    records = [record(run="newest", name=f"check{i % 100}", at=now) for i in range(n)]  # names within MAX_NAMES
    records += [record(run=f"old{i}", at=now - timedelta(hours=1)) for i in range(n)]
    runs = LatestRuns()
    started = time.perf_counter()
    runs.add(records)
    took = time.perf_counter() - started
    assert {r.run_id for r in runs.records()} == {"newest"} and len(runs.records()) == n
    assert took < 5.0, took


def test_two_interleaved_runs_each_keep_all_their_records():
    """A quick check written in the middle of a long full one: the full run's FAIL, written before the quick run,
    is still served when the full run goes on (its records are one run, whatever came between)."""
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    full = [record(Status.PASS, run="full", name="gpu_count", at=t0),
            record(Status.FAIL, run="full", name="gemm_tflops", at=t0 + timedelta(minutes=1))]
    quick = [record(Status.PASS, run="quick", name="ecc", at=t0 + timedelta(minutes=2))]
    later = [record(Status.PASS, run="full", name="hbm_bandwidth", at=t0 + timedelta(minutes=3))]
    kept = latest([*full, *quick, *later])
    assert sorted(r.name for r in kept) == ["gemm_tflops", "gpu_count", "hbm_bandwidth"]


def test_hosts_are_bounded_and_the_dropped_records_counted(tmp_path: Path):
    """50,000 host names took 770 MB and 21 s a render (reliability review D12 c): hosts past the bound are
    dropped, counted, and the hosts kept still follow their newer runs."""
    runs = LatestRuns(max_hosts=3)
    runs.add([record(run=f"r-{h}", host=h) for h in ("a", "b", "c", "d", "e")])
    runs.add([record(Status.FAIL, run="r-a2", host="a"), record(run="r-f", host="f")])
    assert sorted(r.run_id for r in runs.records()) == ["r-a2", "r-b", "r-c"] and runs.dropped == 3
    results = tmp_path / "r.jsonl"
    save_results([record(run=f"r{i}", host=f"h{i}") for i in range(5)], results, db="none")
    proc = run_gpuval("exporter", "--results", str(results), "--once", "--max-hosts", "2")
    assert proc.returncode == 0, proc.stderr
    assert len(samples(proc.stdout)["gpuval_run_info"]) == 2
    assert counter(proc.stdout, "gpuval_exporter_dropped_records") == 3.0


def test_check_names_of_a_host_are_bounded_and_the_dropped_records_counted():
    """One host's records under 50,000 check names took 22.6 s and 343 MB for `exporter --once`: a host keeps at
    most MAX_NAMES check names; records under further names are dropped and counted, as hosts past the bound are,
    and the names kept still follow their newer runs."""
    runs = LatestRuns()
    start = time.monotonic()
    runs.add(record(run="r1", host="a", name=f"c{i}") for i in range(50_000))
    assert len(runs.records()) == MAX_NAMES and runs.dropped == 50_000 - MAX_NAMES
    runs.add([record(Status.FAIL, run="r2", host="a", name="c0"), record(run="r2", host="a", name="new"),
              record(run="r3", host="b", name="c0")])
    assert [(r.run_id, r.name) for r in runs.records()] == [("r2", "c0"), ("r3", "c0")]
    assert runs.dropped == 50_000 - MAX_NAMES + 1 and time.monotonic() - start < 10
