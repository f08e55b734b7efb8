"""A `gpuval fleet retest` that is stopped, on the session's real Slurm cluster (its fleet partition): the node it
lifted into its re-test window (Slurm 22.05 runs no job on a drained node, a reservation's jobs included: MAINT,
IGNORE_JOBS, FLEX and OVERLAP tried) never stays in service unproven.

- SIGTERM (and SIGHUP) is Ctrl-C: the window closes, the node is drained again with its own reason, the reservation
  goes, the round's jobs are cancelled, exit 130. Before: the process died where it stood, the node stayed lifted.
- SIGKILL runs nothing: the node stays lifted, in the reservation (out of everyone else's jobs). The re-test
  recorded the node's reason before it lifted it; the next `gpuval fleet retest` drains it again with that reason,
  deletes the stale reservation, and re-tests it. Before: gpuval forgot the node (no drain: no census entry), and
  the documented clean-up (delete the reservation by hand) put a convicted node back in service.

The held node f1 is convicted by FLEET_NODE_CRASH with the bundle its check would have kept (the fleet's own
writer); its re-test passes (it is healthy now), so the last run lifts it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuval.fleet.act.grounds import settings_json
from gpuval.fleet.plan.expect import TestSizes
from gpuval.fleet.run.job import JobSettings
from gpuval.fleet.plan.terms import FleetConfig
from gpuval.operate.codes import Acted
from gpuval.operate.evidence import Conviction, write_bundle
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status
from tests.conftest import run_gpuval

RUN = "20261128T120000Z-f1ee73"
REASON = f"gpuval: FLEET_NODE_CRASH {RUN}"


def _hold(cluster, state: Path) -> None:
    """f1 drained by a fleet check's conviction, its bundle kept (64 KiB, CPU ranks' samples and iterations, a wide
    cut: at 2 samples a test this shared machine's noise once left the partners' pair undecided, and f1 with it)."""
    settings = JobSettings(run_id=RUN, sizes=TestSizes(1 << 16, 1 << 16), iters=5, warmup=1, timeout_s=120)
    config = FleetConfig(cut=0.5, suite_samples=8, screen_samples=4, retest_samples=8, max_samples=16)
    fleet = {"cause": "node crashed", "reason": "its node tests crashed", "codes": ["FLEET_NODE_CRASH"], "tests": [],
             "settings": settings_json(settings, config)}
    action = NodeAction("slurm", "f1", Status.FAIL, Acted.DRAINED, "fleet")
    write_bundle(state, None, "fleet check", Conviction(RUN, [], [], action, fleet))
    cluster.scontrol("update", "nodename=f1", "state=drain", f"reason={REASON}")


def _held(cluster) -> bool:
    """Whether f1 is drained with its own reason."""
    f1 = cluster.node("f1")
    return f1.drained and f1.reason == REASON


def _start(env: dict[str, str]) -> subprocess.Popen:
    """`gpuval fleet retest` of what gpuval holds, partners f4 and f6, as a process of its own (to be signalled)."""
    return subprocess.Popen([sys.executable, "-m", "gpuval", "fleet", "retest", "--on", "slurm", "--opt",
                             "partition=fleet", "--partners", "f4,f6", "--poll", "1", "--json"],
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lifted(cluster, proc: subprocess.Popen) -> None:
    """Until f1 is lifted into the re-test window."""
    deadline = time.monotonic() + 120
    while cluster.node("f1").drained:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "f1 was never lifted into the window"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stopped_retest_never_leaves_its_node_in_service(fabric, tmp_path: Path):
    state = tmp_path / "state"
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs"), "GPUVAL_STATE_DIR": str(state)}
    _hold(fabric, state)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        proc = _start(env)
        _lifted(fabric, proc)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "interrupted" in err, (signum, proc.returncode, err[-2000:])
        assert _held(fabric)
        assert "No reservations" in fabric.scontrol("show", "reservation")
        assert "gpuval-fleet" not in subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True,
                                                    env=fabric.cmd_env(), timeout=30).stdout

    proc = _start(env)
    _lifted(fabric, proc)
    proc.kill()
    proc.wait(timeout=30)
    assert not fabric.node("f1").drained and "gpuval-retest-" in fabric.scontrol("show", "reservation")

    again = run_gpuval("fleet", "retest", "--on", "slurm", "--opt", "partition=fleet", "--partners", "f4,f6",
                       "--poll", "1", "--json", env=env, timeout=240)
    assert again.returncode == 0, (again.stdout[-4000:], again.stderr[-3000:])
    done = json.loads(again.stdout)
    assert [(a["node"], a["action"]) for a in done["actions"]] == [("f1", "lifted")], done
    assert any(f"f1 drained again ({REASON!r})" in note for note in done["notes"]), done["notes"]
    assert "No reservations" in fabric.scontrol("show", "reservation")
    assert not fabric.node("f1").drained
