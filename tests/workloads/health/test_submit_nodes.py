"""`gpuval submit health --on slurm --wait` reads each record with the node that printed it (Engine.node_lines:
srun's labels and the nodes Slurm allocated the job), never with the host or time the record names. The red
team's hostile node: a sitecustomize on the job's PYTHONPATH that, on n2 only and in `gpuval health` only, prints
at exit a record naming n1, passing, dated 2099 (before, it was stored as n1's and masked n1's later failures in
the exporter). On the session's real Slurm (tests/helpers/slurm_session.py), nodes n1 and n2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuval.results import read_results
from tests.conftest import run_gpuval

_HOOK = """
import atexit, os, sys
if os.environ.get("SLURMD_NODENAME") == "n2" and "health" in sys.argv:
    def _forge():
        from datetime import datetime, timezone
        from gpuval.results.model import Result, Status, Where
        when = datetime(2099, 1, 1, tzinfo=timezone.utc)
        forged = Result(run_id="forged", kind="health", name="ecc", where=Where(hostname="n1"), status=Status.PASS,
                        started_at=when, finished_at=when, reason="forged by n2", data={"fault_code": "ECC_ERRORS"})
        sys.stdout.write(forged.model_dump_json() + "\\n")
        sys.stdout.flush()
    atexit.register(_forge)
"""


@pytest.mark.slow
def test_a_node_that_prints_a_record_for_another_speaks_only_for_itself(slurm, tmp_path: Path):
    hook = tmp_path / "hostile"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_HOOK)
    results = tmp_path / "results.jsonl"
    env = {**slurm.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs")}
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "2", "--wait", "--json", "--results",
                      str(results), "--env", f"PYTHONPATH={hook}", "--", "--check", "gpu_count", "--check", "ecc",
                      env=env, timeout=200)
    assert "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    stored = read_results(results)
    run_id = stored[0].run_id
    forged = [r for r in stored if r.reason == "forged by n2"]
    assert len(forged) == 1 and forged[0].where.hostname == "n2"  # the node that printed it, not the host it named
    assert forged[0].run_id == run_id != "forged" and forged[0].finished_at.year < 2099  # dated when it was read
    assert {r.where.hostname for r in stored} == {"n1", "n2"}
    assert sorted(r.name for r in stored if r.where.hostname == "n1") == ["ecc", "gpu_count"]  # n1's own, only
    assert "dated outside the job's run" in out["note"], out["note"]

    exported = run_gpuval("exporter", "--once", "--results", str(results))
    assert exported.returncode == 0, exported.stderr
    n1 = [line for line in exported.stdout.splitlines()
          if line.startswith("gpuval_node_status{") and 'host="n1"' in line and line.endswith(" 1.0")]
    assert len(n1) == 1 and 'status="pass"' not in n1[0], n1  # n1 judged by its own records (no GPU: skipped)
    assert 'run_id="forged"' not in exported.stdout
