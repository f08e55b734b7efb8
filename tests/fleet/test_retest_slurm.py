"""Take a node out, keep why, bring it back, on the session's real Slurm cluster (its fleet partition,
tests/helpers/slurm_session.py): every drain gpuval makes keeps its evidence bundle, `gpuval nodes` points at a bundle
that is there, and `gpuval fleet retest` lifts the node whose re-test passes and keeps the one whose re-test fails.

A node is convicted by crashing, never by a noisy slowness, so the chain is quick and its verdicts certain on this
shared machine: a sitecustomize on the jobs' PYTHONPATH ends `gpuval fleet node-test` right after its start line on
the nodes a file names (a node whose test process dies), as the red team planted its broken node. Crashed twice, a
node fails its node tests: FLEET_NODE_CRASH. Everything else is real: slurmctld, the jobs, the lines read back per
node, the drains and the reservation read back from Slurm.

1. `gpuval fleet check --drain` of f1, f2, f4, f1 broken: f1 is drained, its bundle kept where the check ran.
2. The re-test of a job's suspect (what `jobs diagnose --retest` runs: fleet.act.retests.retest_suspects) of f2,
   broken, with the partners f4 and f6: f2 is drained, and keeps its bundle (before: no bundle, so no `fleet
   retest` could lift it).
3. `gpuval nodes` lists f1 and f2, each with a bundle that is on disk; a person's drain of f3, whose reason only
   starts like gpuval's, is not listed.
4. f1 repaired, `gpuval fleet retest` with the partners f4 and f6: f1 passes and is back in service, f2 fails and is
   drained again with its reason, f3 is untouched, no reservation is left, and the re-test's tests took the settings
   the bundles kept (64 KiB messages)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuval.engines.nodes import SlurmNode
from gpuval.fleet.act.retests import RetestRequest, retest_suspects
from gpuval.operate.codes import Acted
from gpuval.results.model import Status
from tests.conftest import run_gpuval

PERSON = "gpuval: RMA-ticket-4711 do not resume"
# The check's settings, the same as the suspect re-test's (so `fleet retest` repeats both in one check): CPU ranks'
# default samples and iterations, small messages, at most 6 samples a test, and a cut so wide (a pair 10x slower
# than the fleet) that only a crash convicts: the chain is this test's claim, and a loaded full run once measured a
# healthy pair 78% under the fleet (judging slowness is tests/fleet/test_run_slurm.py's subject).
SETTINGS = ("--size", "64K", "--cut", "0.9", "--max-samples", "6", "--poll", "1")
_HOOK = """
import json, os, sys
node = os.environ.get("SLURMD_NODENAME", "")
if "node-test" in sys.argv and node in open({broken!r}).read().split():
    index = int(sys.argv[sys.argv.index("--round") + 1])
    print(json.dumps({{"gpuval_fleet": 1, "event": "start", "round": index, "node": node}}), flush=True)
    os._exit(1)
"""


def _broken(tmp_path: Path, *nodes: str) -> Path:
    """The hook's folder (for PYTHONPATH), its file naming the nodes whose node test crashes now."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "broken").write_text(" ".join(nodes))
    (hook / "sitecustomize.py").write_text(_HOOK.format(broken=str(hook / "broken")))
    return hook


@pytest.mark.slow
@pytest.mark.timeout(360)  # about 45 s alone: three fleet checks on four nodes
def test_every_drain_keeps_its_bundle_nodes_shows_it_and_retest_lifts_a_pass_and_keeps_a_fail(fabric, tmp_path,
                                                                                              monkeypatch):
    state = tmp_path / "state"
    hook = _broken(tmp_path, "f1", "f2")
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs"), "GPUVAL_STATE_DIR": str(state)}
    check = run_gpuval("fleet", "check", "--on", "slurm", "--opt", "partition=fleet", "--nodelist", "f1,f2,f4",
                       "--wait", "--json", "--drain", *SETTINGS, "--env", f"PYTHONPATH={hook}", env=env, timeout=240)
    assert check.returncode == 1, check.stderr[-3000:]
    out = json.loads(check.stdout)
    assert {n["host"]: n["fault_codes"] for n in out["nodes"]} == {"f1": ["FLEET_NODE_CRASH"], "f2": [
        "FLEET_NODE_CRASH"], "f4": []}, out["nodes"]
    assert fabric.node("f1") == SlurmNode("f1", "IDLE+DRAIN", f"gpuval: FLEET_NODE_CRASH {out['run_id']}")
    fabric.scontrol("update", "nodename=f2", "state=resume")  # the check's drain of f2: the suspect's is next

    for name, value in {**env, "PYTHONPATH": str(hook)}.items():
        monkeypatch.setenv(name, value)  # the re-test runs here; its jobs take this process's environment
    suspect = retest_suspects(RetestRequest(
        on="slurm", options={"partition": "fleet"}, job_id="4711", job_nodes=["f2"], suspects=["f2"],
        run_id="20261201T120000Z-0f2f2f", partners="f4,f6", size=1 << 16, cut=0.9, max_samples=6, poll_s=1.0))
    assert [(n.node, n.status, n.action.action) for n in suspect.under_test] == [("f2", Status.FAIL, Acted.DRAINED)]
    assert fabric.node("f2") == SlurmNode("f2", "IDLE+DRAIN", "gpuval: FLEET_NODE_CRASH 20261201T120000Z-0f2f2f")
    fabric.scontrol("update", "nodename=f3", "state=drain", f"reason={PERSON}")

    listed = run_gpuval("nodes", "--on", "slurm", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    held = {h["node"]: h for h in json.loads(listed.stdout)}
    assert sorted(held) == ["f1", "f2"]  # f3's reason is a person's
    for node, run in (("f1", out["run_id"]), ("f2", "20261201T120000Z-0f2f2f")):
        bundle = Path(held[node]["evidence"].removesuffix(" where the fleet check ran"))
        assert bundle == state / "evidence" / node / f"{run}.yaml" and bundle.is_file(), held[node]
        assert "gpuval fleet retest" in held[node]["lifts"]

    _broken(tmp_path, "f2")  # f1 repaired
    proc = run_gpuval("fleet", "retest", "--on", "slurm", "--opt", "partition=fleet", "--partners", "f4,f6",
                      "--json", "--poll", "1", "--env", f"PYTHONPATH={hook}", env=env, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    done = json.loads(proc.stdout)
    assert {a["node"]: (a["verdict"], a["action"]) for a in done["actions"]} == \
        {"f1": ("pass", "lifted"), "f2": ("fail", "kept drained")}, proc.stdout[-6000:]
    assert not fabric.node("f1").drained
    assert fabric.node("f2") == SlurmNode("f2", "IDLE+DRAIN", "gpuval: FLEET_NODE_CRASH 20261201T120000Z-0f2f2f")
    assert fabric.node("f3") == SlurmNode("f3", "IDLE+DRAIN", PERSON)
    assert "No reservations" in fabric.scontrol("show", "reservation")
    [again] = done["checks"]  # one check: both bundles kept the same settings
    assert {n["host"] for n in again["nodes"]} == {"f1", "f2", "f4", "f6"} and again["actions"] == []
    sizes = {int(n) for job in (tmp_path / "jobs").rglob("job.sbatch")
             for n in re.findall(r"fleet (?:node|rank)-test .*--size (\d+)", job.read_text())}
    assert sizes == {1 << 16}  # every test, the check's, the suspect's and the re-test's, at the size convicted
