"""`gpuval health --drain` acts on the node first: a full disk under the --prometheus file, or a
results store another process holds locked, never stops or delays the drain. Real Slurm (tests/operate/conftest.py),
real full disk (a 4 kB tmpfs in a private mount namespace), a real SQLite write lock."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from gpuval.engines.slurm.nodes import read_node
from gpuval.results import read_results
from tests.conftest import run_gpuval
from tests.operate.support import recorded_machine


def _in_full_folder(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Run argv with `folder` a full file system (a 4 kB tmpfs mounted in a mount namespace of its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    private = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount"]
    script = 'mount -t tmpfs -o size=4k tmpfs "$0" && exec "$@"'
    return subprocess.run([*private, "sh", "-c", script, str(folder), *argv], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


def test_a_metrics_write_on_a_full_disk_names_its_file_and_the_node_is_drained(cluster, tmp_path: Path):
    machine = recorded_machine(tmp_path, "bad", ecc_errors=4)
    target = tmp_path / "textfile" / "gpuval.prom"
    proc = _in_full_folder(target.parent, [sys.executable, "-m", "gpuval", "health", "--recorded", str(machine),
                                           "--node", "n1", "--scheduler", "slurm", "--drain", "--prometheus",
                                           str(target)])
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the checks' verdict: a fail
    assert read_node("n1").drained and read_node("n1").reason.startswith("gpuval: ECC_ERRORS")
    assert f"{target}" in proc.stderr and "No space left on device" in proc.stderr
    assert "slurm node n1: drained" in proc.stdout


def test_a_locked_store_does_not_delay_the_drain(cluster, tmp_path: Path):
    db = tmp_path / "locked.db"
    machine = recorded_machine(tmp_path, "bad", ecc_errors=4)
    env = {**os.environ, "GPUVAL_DB": str(db)}
    made = run_gpuval("health", "--recorded", str(machine), "--check", "ecc", env={"GPUVAL_DB": str(db)})
    assert made.returncode == 1 and db.exists(), made.stderr  # the store exists, in WAL mode
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the write lock (a long import, say)
    results = tmp_path / "r.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "gpuval", "health", "--recorded", str(machine), "--node", "n2",
                             "--scheduler", "slurm", "--drain", "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        started = time.monotonic()
        while not read_node("n2").drained and time.monotonic() - started < 25:
            assert proc.poll() is None or read_node("n2").drained, proc.communicate()
            time.sleep(0.5)
        assert read_node("n2").drained, "not drained while the store was locked"
        assert proc.poll() is None  # still waiting for the store: the records come after the action
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "slurm node n2: drained" in out, out + err
    run_id = read_results(results)[-1].run_id
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT count(*) FROM gpuval_results WHERE run_id = ?", (run_id,)).fetchone()[0]
    assert stored == len(read_results(results))  # every record of the run, stored once the lock was released


def test_a_poisoned_last_full_file_never_stops_the_quick_drain(cluster, tmp_path: Path):
    """Markup in the kept fault codes and findings, then a FIFO in place of the file: the quick check of a node
    with ECC errors still prints its lines and drains it (the kept result is refused: could not read)."""
    import json

    from gpuval.workloads.health.last_full import path_for

    machine = recorded_machine(tmp_path, "ecc", ecc_errors=2)
    kept = path_for("n1")
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"node": "n1", "run_id": "[/]", "verdict": "fail", "finished_at": "2099-01-01T00:00:00",
                                "fault_codes": ["[/]", "[bold]X"], "findings": ["[/]"]}))
    proc = run_gpuval("health", "--quick", "--recorded", str(machine), "--node", "n1", "--scheduler", "slurm",
                      "--drain")
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    assert read_node("n1").drained and "ECC_ERRORS" in read_node("n1").reason
    cluster.scontrol("update", "nodename=n1", "state=resume")
    kept.unlink()
    os.mkfifo(kept)
    proc = run_gpuval("health", "--quick", "--recorded", str(machine), "--node", "n1", "--scheduler", "slurm",
                      "--drain", timeout=60)
    assert proc.returncode == 1 and "not a regular file" in proc.stdout, proc.stdout + proc.stderr
    assert read_node("n1").drained
