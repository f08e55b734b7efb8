"""`gpuval import` through the real command line, on real nccl-tests logs (tests/data: the NDv4 tables of the source
documents) and gpuval JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

from gpuval.results import save_results
from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import DATA, run_gpuval
from benchmarks.synthetic_fleet import fleet_run


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
    # reduction op, root -1, count x 4 B = size, busbw/algbw = 2x7/8): the inference, no longer "unknown"
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
