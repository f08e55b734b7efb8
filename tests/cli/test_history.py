"""`gpuval history`, `compare` and `report --md` through the real command line, on synthetic fleets in the store."""

from __future__ import annotations

import json
from pathlib import Path

from gpuval.results.store import open_store
from tests.conftest import run_gpuval
from benchmarks.synthetic_fleet import fleet_run


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

    from gpuval.results import save_results
    from tests.helpers.records import record

    db = str(tmp_path / "s.db")
    now = datetime.now(timezone.utc)
    for run, sku, age in (("old-a100", "Standard_ND96asr_v4", 2), ("new-h100", "Standard_ND96isr_H100_v5", 1)):
        save_results([record(run=run, sku=sku, at=now - timedelta(hours=age))], tmp_path / "r.jsonl", db=db)
    proc = run_gpuval("history", "--sku", "Standard_ND96asr_v4", "--limit", "1", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)] == ["old-a100"]


def test_a_report_that_could_judge_nothing_exits_2_and_one_that_could_not_run_a_node_too(tmp_path):
    """`gpuval report` follows the one exit contract (results.verdict): a run whose every record was skipped was
    exit 0 (as if it passed); it is 2, as is a run with a node that could not run; a passing run stays 0."""
    from gpuval.results import save_results
    from gpuval.results.model import Status
    from tests.helpers.records import records

    db = str(tmp_path / "r.db")
    runs = {"skipped": [Status.SKIPPED, Status.SKIPPED], "error": [Status.PASS, Status.ERROR],
            "passed": [Status.PASS, Status.SKIPPED]}
    for run, statuses in runs.items():
        save_results(records(statuses, run=run), tmp_path / "r.jsonl", db=db)
    codes = {run: run_gpuval("report", "--db", db, "--run", run, "-o", str(tmp_path / f"{run}.html")).returncode
             for run in runs}
    assert codes == {"skipped": 2, "error": 2, "passed": 0}
