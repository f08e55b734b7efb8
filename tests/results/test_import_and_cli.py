"""`gpuval import`, `history`, `compare` and `report --md` through the real command line, on real nccl-tests logs
(tests/data: the NDv4 tables of the source documents) and gpuval JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

from dataclasses import replace

import pytest

from benchmarks.fleet import fleet_run
from gpuval.results import save_results
from gpuval.results.query import Query
from gpuval.results.store import open_store
from gpuval.workloads import ingest
from gpuval.workloads.lammps.log import LammpsRun
from tests.conftest import DATA, run_gpuval


def test_import_nccl_tests_logs_as_collective_records(tmp_path: Path):
    db = str(tmp_path / "r.db")
    proc = run_gpuval("import", str(DATA / "nccl-tests" / "ndv4-1node-allreduce.txt"), str(DATA / "nccl-tests" / "ndv4-2node-allreduce.txt"),
                      "--run-id", "ndv4", "--sku", "Standard_ND96asr_v4", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stored"] == 2 and [f["records"] for f in out["files"]] == [1, 1]
    records = open_store(db).results(Query(run_ids=["ndv4"]))
    by_host = {r.where.hostname: r for r in records}
    assert set(by_host) == {"ndv4-1node-allreduce", "ndv4-2node-allreduce"}  # named after the files
    one = by_host["ndv4-1node-allreduce"]
    # a bare table does not name its collective (no header in the document); its columns prove all_reduce (a
    # reduction op, root -1, count x 4 B = size, busbw/algbw = 2x7/8): issue 9 changed "unknown" to the inference
    assert one.kind == "collective" and one.name == "all_reduce" and one.where.sku == "Standard_ND96asr_v4"
    assert one.params["collective_inferred"] is True and one.status.value == "pass"
    busbw = one.metric("busbw")
    assert busbw.size_bytes == 8 * 1024**3 and 230 < busbw.value < 240  # document 002: ~234 GB/s at 8 GiB
    assert len(one.data.results) == 31


def test_import_jsonl_keeps_run_ids_and_reports_a_bad_file(tmp_path: Path):
    log = save_results(fleet_run("from-job", 3), tmp_path / "job.jsonl", db="none")
    junk = tmp_path / "notes.txt"
    junk.write_text("nothing measured here\n")
    db = str(tmp_path / "r.db")
    proc = run_gpuval("import", str(log), str(junk), "--db", db)
    assert proc.returncode == 2
    assert "stored 3 records" in proc.stdout and "run from-job" in proc.stdout
    assert "notes.txt: no test or log gpuval can read" in proc.stderr
    assert len(open_store(db).results(Query(run_ids=["from-job"]))) == 3


def test_unknown_kind_is_skipped_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ingest, "READERS", [replace(r, records=None) if r.kind == "nccl-tests" else r
                                            for r in ingest.READERS])
    found = ingest.import_file(DATA / "nccl-tests" / "ndv4-1node-allreduce.txt", ingest.Origin("r"))
    assert found.records == [] and found.error is None
    assert "a 'nccl-tests' document: gpuval does not store this kind yet" in found.skipped[0]


def test_lammps_document_becomes_a_record(tmp_path: Path):
    doc = LammpsRun(source="log.lammps", version="29 Sep 2021", units="lj", loop_time_s=0.93, procs=2, steps=100,
                    atoms=32000, timesteps_per_s=107.6, atom_steps_per_s=3.44e6, tau_per_day=46483.0)
    log = tmp_path / "log.lammps"
    log.write_text("")
    [reader] = [r for r in ingest.READERS if r.kind == "lammps"]
    [record] = reader.records(doc, ingest.Origin("r", host="n1"), log)
    assert record.kind == "lammps" and record.status.value == "pass" and record.where.ranks == 2
    assert record.metric("timesteps_per_s").value == 107.6 and record.params["atoms"] == 32000


def test_history_compare_and_markdown_report(tmp_path: Path):
    db = str(tmp_path / "r.db")
    store = open_store(db)
    store.add(fleet_run("week1", 6, seed=1))
    store.add(fleet_run("week2", 6, {"node0004": 0.6}, seed=2))

    proc = run_gpuval("history", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)
    assert [r["run_id"] for r in runs] == ["week2", "week1"] and runs[0]["hosts"] == 6
    table = run_gpuval("history", "--db", db, "--host", "node0004", "--since", "1d")
    assert "week2" in table.stdout and "week1" in table.stdout

    cmp = run_gpuval("compare", "week1", "week2", "--db", db)
    assert cmp.returncode == 1, cmp.stderr
    assert "node0004" in cmp.stdout and "regressed" in cmp.stdout and "verdict: regressed" in cmp.stdout
    same = run_gpuval("compare", "week1", "week1", "--db", db, "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["verdict"] == "same"
    missing = run_gpuval("compare", "week1", "nope", "--db", db)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr

    html, md = tmp_path / "out" / "r.html", tmp_path / "r.md"
    rep = run_gpuval("report", "--db", db, "--output", str(html), "--md", str(md))
    assert rep.returncode == 1, rep.stderr  # node0004 fails against its peers
    assert "run week2: FAIL" in rep.stdout and f"report: {html}" in rep.stdout
    summary = md.read_text()
    assert "## gpuval run `week2`: **FAIL**" in summary
    assert "| node0004 | fail | all_reduce busbw" in summary
    assert html.read_text().startswith("<!DOCTYPE html>")
    empty = run_gpuval("report", "--db", str(tmp_path / "empty.db"))
    assert empty.returncode == 2 and "no runs in" in empty.stderr


def test_history_filters_by_sku_before_the_limit(tmp_path):
    """The newest run is another SKU's: `--sku A --limit 1` still finds A's run (filtered in the database)."""
    from datetime import datetime, timedelta, timezone

    from gpuval.results import Result, Status, Where, save_results

    db = str(tmp_path / "s.db")
    now = datetime.now(timezone.utc)
    for run, sku, age in (("old-a100", "Standard_ND96asr_v4", 2), ("new-h100", "Standard_ND96isr_H100_v5", 1)):
        save_results([Result(run_id=run, kind="health", name="ecc", status=Status.PASS,
                             started_at=now - timedelta(hours=age), where=Where(hostname="n1", sku=sku))],
                     tmp_path / "r.jsonl", db=db)
    proc = run_gpuval("history", "--sku", "Standard_ND96asr_v4", "--limit", "1", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)] == ["old-a100"]
