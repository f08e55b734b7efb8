"""`gpuval fleet check --on slurm --drain` under the drain brake, on three nodes of the session's real Slurm cluster
(f1, f2, f4 of its fleet partition: healthy on its fabric, tests/helpers/slurm_session.py). Each node's health suite
judges its own recorded A100 machine (tests/operate/support.py) instead of this GPU-less machine
(tests/fleet/recorded_nodes.py). Everything else is real: the jobs, the lines read back per node, the verdicts, the
drains read back from slurmctld. Before the brake, ECC errors on every node (a bad baseline or driver does the same) drained
all three."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.fleet.recorded_nodes import recorded_check
from tests.operate.support import recorded_machine

NODES = ["f1", "f2", "f4"]
SETTINGS = ("--drain", "--samples", "2,2,2", "--size", "64K", "--iters", "2", "--warmup", "0", "--cut", "0.5",
            "--timeout", "120", "--poll", "1")


def _check(slurm, tmp_path: Path, machines: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    """A fleet check of NODES with --drain, each node judging its machine in `machines`."""
    return recorded_check(slurm, tmp_path, machines, *SETTINGS, *args)


def test_ecc_errors_on_every_node_are_one_finding_and_nothing_is_drained(slurm, tmp_path: Path):
    bad = recorded_machine(tmp_path, "bad", ecc_errors=4)
    proc = _check(slurm, tmp_path, dict.fromkeys(NODES, bad), "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert {n["host"]: (n["status"], n["fault_codes"]) for n in out["nodes"]} == \
        dict.fromkeys(NODES, ("fail", ["ECC_ERRORS"]))  # each node's own verdict stands
    [finding] = [g for g in out["groups"] if g["cause"] == "shared fault"]
    assert finding["group"] == "ECC_ERRORS on 3 of 3 nodes" and finding["status"] == "fail"
    assert sorted(finding["hosts"]) == NODES
    assert "suspect the baseline, the software or a shared part, not the nodes" in finding["reason"]
    assert [(a["node"], a["action"]) for a in out["actions"]] == [(n, "not drained") for n in NODES]
    assert any(n.startswith("to proceed: ") for n in out["notes"])
    assert not slurm.drained("fleet")
    stored = open_store(os.environ["GPUVAL_DB"]).results(Query(run_ids=[out["run_id"]]))
    [group] = [r for r in stored if r.kind == "fleet" and r.name == "group"]
    assert group.data.cause == "shared fault" and sorted(group.data.members) == NODES  # the finding is a record
    assert sum(r.kind == "health" and r.name == "ecc" and r.status.value == "fail" for r in stored) == 3


def test_past_the_cap_the_rest_stay_in_service_and_the_check_says_so(slurm, tmp_path: Path):
    """--max-drain 1, three different failures (ECC errors on two nodes is no shared fault: not more than two):
    f1 is drained, f2 and f4 are not, and the printed summary says why and how to proceed."""
    ecc = recorded_machine(tmp_path, "ecc", ecc_errors=4)
    slow = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    proc = _check(slurm, tmp_path, {"f1": ecc, "f2": slow, "f4": ecc}, "--max-drain", "1", "--max-samples", "6")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert set(slurm.drained("fleet")) == {"f1"}
    text = proc.stdout
    assert "FAIL    drain brake: 2 failed nodes not drained" in text
    assert "gpuval holds 1 nodes drained and its cap is 1 (--max-drain): 2 failed nodes are not drained (f2, f4)" in text
    assert "drained f1: failed checks: reason 'gpuval: ECC_ERRORS" in text
    assert "not drained f2: the drain brake: gpuval holds 1 nodes drained, its cap is 1 (--max-drain)" in text
    assert "note: to proceed: find what the failing nodes share" in text
    # The drained node's evidence bundle, kept where the check ran: its verdict, its node test's failing records,
    # the settings its tests ran with; the nodes left in service have none.
    [bundle] = (tmp_path / "state" / "evidence" / "f1").glob("*.yaml")
    kept = yaml.safe_load(bundle.read_text())["evidence"]
    assert kept["action"] == "drained" and kept["fleet"]["codes"] == ["ECC_ERRORS"]
    assert kept["fleet"]["cause"] == "health failed" and kept["fleet"]["tests"][0]["kind"] == "node"
    assert kept["fleet"]["settings"]["sizes"] == {"node": 65536, "multi": 65536, "rack": None}  # no rack band
    assert kept["fleet"]["settings"]["max_samples"] == 6  # what its re-test uses
    assert [r["name"] for r in kept["records"]] == ["ecc"] and kept["records"][0]["where"]["hostname"] == "f1"
    assert not (tmp_path / "state" / "evidence" / "f2").exists()
