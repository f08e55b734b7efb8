"""A node lifted into a `gpuval fleet retest` window is still gpuval's, on the session's real Slurm cluster: Slurm
22.05 runs no job on a drained node, so the re-test lifts the held node's drain into its reservation
(engines/slurm/site.py) while its tests run, and drains it again as it ends. The lift writes gpuval's note (the
window, since when, the reason) in the node's comment in the same scontrol update, and the drain again puts back
the comment it replaced.

- The drain brake counts it (red team 5, N3): two nodes failing under `--max-drain 2` while f1 sits in the window.
  Before, the census saw only drained nodes, so both were drained, and the re-test's end drained f1 again: three
  gpuval drains under a cap of 2. Now one of them is held back, and two stay.
- `gpuval nodes` lists it (N6): a re-test killed outright (SIGKILL: its way out never runs) leaves f1 lifted in its
  reservation. Before, `gpuval nodes` said gpuval held nothing. Now it lists f1 in that window, since when, by which
  run, and that the next `gpuval fleet retest` closes it; that re-test's first step (windows.recover) drains it again
  with its reason and puts back a person's comment.
- A drain whose evidence bundle could not be written (N5): it stands (the node failed) and says what is lost, and
  `gpuval nodes` says a person lifts it, where before it pointed at a bundle that is not there and offered
  `gpuval fleet retest`, which then refused.

The windows are the real Site's on real slurmctld and slurmd; no fleet check runs (the window, the brake and the
listing are what is claimed; tests/fleet/test_retest_window_slurm.py runs the whole re-test)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval.engines import get_engine
from gpuval.engines.slurm.nodes import SlurmNodes
from gpuval.fleet.act.windows import recover
from gpuval.operate.act import Charge, act_on_verdicts
from gpuval.operate.brake import drained_by_gpuval, parse_cap
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Grounds
from gpuval.results.model import Status
from tests.conftest import run_gpuval

CONVICTED = "20261129T003000Z-f1c0de"
REASON = f"gpuval: FLEET_NODE_CRASH {CONVICTED}"
RETEST = "20261129T004000Z-3e7e57"
WINDOW = f"gpuval-retest-{RETEST}"
PERSON = "rack 4 | bay 2"  # a person's comment on f1, kept through the window
# A re-test's window, killed outright once f1 is lifted into it (what SIGKILL leaves: no way out ran).
_KILLED = """
import os, signal, sys
from pathlib import Path
from gpuval.engines import get_engine
from gpuval.fleet.act.windows import recorded_window
site = get_engine("slurm", {"partition": "fleet"}).site()
with recorded_window(site, {"f1": sys.argv[1]}, ["f2"], sys.argv[2], Path(sys.argv[3])):
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def held(slurm, monkeypatch):
    """f1 drained by a fleet conviction, with a person's comment; scontrol and sinfo reach the session's cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    slurm.scontrol("update", "nodename=f1", "state=drain", f"reason={REASON}", f"comment={PERSON}")
    yield slurm
    slurm.scontrol("update", "nodename=f1", "comment=")


def _gpuval_holds() -> dict[str, str]:
    """node -> its window ('' where its drain holds it), of every node gpuval holds now."""
    return {h.name: h.window for h in drained_by_gpuval(SlurmNodes()).held}


@pytest.mark.timeout(120)
def test_a_node_lifted_into_a_retest_window_counts_against_the_drain_brake(held, tmp_path: Path):
    site = get_engine("slurm", {"partition": "fleet"}).site()
    failing = [Charge(n, Status.FAIL, ["ECC_ERRORS"], Grounds("a recorded health run", [], [])) for n in ("n1", "n2")]
    with site.retest_window({"f1": REASON}, ["f2"], WINDOW) as opened:
        assert opened == {"f1"} and not held.node("f1").drained
        done = act_on_verdicts(failing, SlurmNodes(settle_s=1.0), parse_cap("2", "--max-drain"),
                               "20261129T004100Z-ecc001", tmp_path / "state")
        inside = drained_by_gpuval(SlurmNodes()).held
    gpuvals = {n for n, why in held.drained().items() if why.startswith("gpuval:")}
    assert gpuvals == {"f1", "n1"}, done.actions  # two, the cap, once f1 is drained again
    assert done.actions["n2"].action is Acted.NOT_DRAINED and "the drain brake" in done.actions["n2"].detail
    assert [(h.name, h.why, h.window) for h in inside] == [("f1", REASON, WINDOW), ("n1", inside[1].why, "")]
    assert _gpuval_holds() == {"f1": "", "n1": ""}
    f1 = held.node("f1")
    assert (f1.drained, f1.reason, f1.comment) == (True, REASON, PERSON)
    assert "No reservations" in held.scontrol("show", "reservation")


@pytest.mark.timeout(120)
def test_nodes_lists_a_node_a_killed_retest_left_in_its_window_and_the_next_retest_closes_it(held, tmp_path: Path):
    state = tmp_path / "state"
    killed = subprocess.run([sys.executable, "-c", _KILLED, REASON, RETEST, str(state)], capture_output=True,
                            text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not held.node("f1").drained and WINDOW in held.scontrol("show", "reservation")

    listed = run_gpuval("nodes", "--on", "slurm", "--json", env={**held.env, "GPUVAL_STATE_DIR": str(state)})
    assert listed.returncode == 0, listed.stderr
    assert [r["node"] for r in json.loads(listed.stdout)] == ["f1"], listed.stdout
    [row] = json.loads(listed.stdout)
    assert (row["node"], row["codes"], row["run_id"], row["window"]) == ("f1", ["FLEET_NODE_CRASH"], CONVICTED,
                                                                         WINDOW), row
    assert row["since"] and f"in re-test window {WINDOW} since " in row["lifts"]
    assert f"`gpuval fleet retest` run {RETEST}" in row["lifts"] and "the next `gpuval fleet retest`" in row["lifts"]

    site = get_engine("slurm", {"partition": "fleet"}).site()
    notes = recover(site, state)  # what the next `gpuval fleet retest` does first
    assert notes == [f"f1 drained again ({REASON!r}): a stopped re-test left it lifted in {WINDOW}",
                     f"reservation {WINDOW} of a stopped re-test deleted"]
    f1 = held.node("f1")
    assert (f1.drained, f1.reason, f1.comment) == (True, REASON, PERSON)
    assert _gpuval_holds() == {"f1": ""}


@pytest.mark.timeout(120)
def test_a_drain_whose_bundle_could_not_be_kept_stands_and_nodes_says_a_person_lifts_it(held, tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "evidence").write_text("")  # the evidence folder cannot be made (as on a full disk)
    grounds = Grounds("fleet check", [], [], fleet={"codes": ["FLEET_NODE_CRASH"], "settings": {"iters": 5}})
    done = act_on_verdicts([Charge("n1", Status.FAIL, ["FLEET_NODE_CRASH"], grounds)], SlurmNodes(),
                           parse_cap("all", "--max-drain"), "20261129T004200Z-b0b0b0", state)

    listed = run_gpuval("nodes", "--on", "slurm", "--json", env={**held.env, "GPUVAL_STATE_DIR": str(state)})
    assert listed.returncode == 0, listed.stderr
    rows = {r["node"]: r for r in json.loads(listed.stdout)}
    assert rows["n1"]["evidence"].startswith("none here (no bundle in ") and rows["n1"]["lifts"].startswith(
        "a person (scontrol update"), rows["n1"]
    assert done.actions["n1"].action is Acted.DRAINED and not done.bundles
    [lost] = done.problems
    assert lost.startswith("evidence of node n1 not written (Not a directory under ") and lost.endswith(
        "it failed, so it stays out of service without it; no `gpuval fleet retest` can repeat the tests that "
        "convicted it, so a person lifts it once it is repaired"), lost
