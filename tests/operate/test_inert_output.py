"""Values from a node, a recording or a store are text, never rich markup, and passwords are never printed (red
team 2): "[/]" in a recorded driver version, a description, a SKU, a run id, a kept fault code prints as written;
`postgresql://u:p@ss@host` and `?password=` never show their secret in history/exporter errors or store
warnings."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import yaml

from gpuval.node.recorded import recorded_data
from gpuval.results import save_results
from gpuval.results.model import Result
from tests.conftest import run_gpuval
from tests.helpers.records import record

MARKUP = "[/]"


def test_markup_in_a_recording_prints_as_written(tmp_path: Path):
    data = recorded_data("Standard_ND96asr_v4")
    data["driver_version"] = "535.1[/]"
    data["description"] = "rack [bold]7[/] node"
    machine = tmp_path / "m.yaml"
    machine.write_text(yaml.safe_dump(data))
    proc = run_gpuval("health", "--recorded", str(machine), "--check", "driver", "--check", "gpu_count")
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr
    assert "535.1[/]" in proc.stdout and "rack [bold]7[/] node" in proc.stdout


def test_markup_in_the_store_prints_as_written(tmp_path: Path):
    now = datetime.now(timezone.utc)
    db = f"sqlite:///{tmp_path / 's.db'}"
    save_results([record(run="r[/]1", host="h", sku="S[/b]", at=now)], tmp_path / "r.jsonl", db=db)
    proc = run_gpuval("history", "--db", db)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "r[/]1" in proc.stdout and "S[/b]" in proc.stdout


def test_passwords_are_never_printed(tmp_path: Path):
    for url in ("postgresql://u:p@ss@127.0.0.1:9/db", "postgresql://u@127.0.0.1:9/db?password=p@ss",
                "postgresql://u:p%40ss@127.0.0.1:9/db"):
        for command in (["history", "--db", url], ["exporter", "--db", url, "--once"]):
            proc = run_gpuval(*command, timeout=120)
            assert proc.returncode == 2, proc.stderr
            assert "p@ss" not in proc.stderr and "ss@" not in proc.stderr and "p%40ss" not in proc.stderr, proc.stderr
            assert "127.0.0.1" in proc.stderr  # the host is still named
    records = [record(host="h")]
    saved = run_gpuval("import", str(_log(tmp_path, records)), "--db", "postgresql://u:p@ss@127.0.0.1:9/db")
    assert "p@ss" not in saved.stderr and "ss@" not in saved.stderr, saved.stderr


def _log(tmp_path: Path, records: list[Result]) -> Path:
    path = tmp_path / "log.jsonl"
    save_results(records, path, db="none")
    return path
