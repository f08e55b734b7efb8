"""`gpuval fleet retest --on slurm` on the session's real Slurm cluster (tests/helpers/slurm_session.py): its fleet
partition's f5 is slow (its slurmd sits behind a 200 Mbit/s link), f1, f4 and f6 are healthy. gpuval holds f1 and f5
with FLEET_SLOW, each with the evidence bundle its conviction kept (the settings its tests ran with, written by the
fleet's own writer); a person holds f2 with a reason that only starts like gpuval's. One re-test, f4 and f6 as
known-good partners, runs the fleet check's rounds inside a real reservation the held nodes are lifted into: f1
passes and is back in service, f5 fails and is drained again with its reason, f2 is untouched, and no reservation is
left behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuval.fleet.convictions import settings_json
from gpuval.fleet.expect import TestSizes
from gpuval.fleet.job import JobSettings
from gpuval.fleet.model import FleetConfig
from gpuval.operate.evidence import Conviction, bundle_path, write_bundle
from gpuval.operate.node_state import NodeAction
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.slurm import scontrol

RUN = "20261127T120000Z-f1ee70"
PERSON = "gpuval: RMA-ticket-4711 do not resume"






def _state(cluster, node: str) -> tuple[str, str]:
    """(its state, its reason) as scontrol shows them."""
    line = scontrol(cluster, "show", "node", node, "-o")
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    reason = line.partition(" Reason=")[2].rpartition(" [")[0] if " Reason=" in line else ""
    return fields["State"], reason


def _convicted(state: Path, node: str) -> None:
    """The bundle the check that convicted `node` would have kept (its settings: 256 KiB, few samples and at most
    64 where the noise calls for more, a wide cut: f5's link is far slower than loopback, this shared machine's
    timings swing by tens of percent). Uncapped, this machine's noise asked for 34 to 91 samples a test and 50 CPU-s
    a rank under load; at most 12 left f5 undecided under load. Behind 400 Mbit/s f5 was 76% ± 6% under its pair's
    partners, too near the 50% cut: 32 samples left it undecided once under CI's load; behind 100 Mbit/s it was
    92% ± 5% under with 16 to 18 samples. Behind 200 Mbit/s (the fabric's rate since each rank took one thread),
    its all_reduce is 85% or more under its partners' and its sendrecv 97%: pooled, about 91%. At most 32 left a
    node undecided once (2026-11-28, a full clean-clone run, this test beside two other fleet checks at the suite's
    start; it passed alone in 37 s right after), and the re-test itself advised `--max-samples 64`: the cap is 64."""
    settings = JobSettings(run_id=RUN, sizes=TestSizes(1 << 18, 1 << 18), iters=2, warmup=1, timeout_s=120)
    config = FleetConfig(cut=0.5, suite_samples=2, screen_samples=4, retest_samples=4, max_samples=64)
    action = NodeAction("slurm", node, Status.FAIL, "drained", "fleet")
    fleet = {"cause": "slow", "reason": "slow with two known-good partners", "codes": ["FLEET_SLOW"], "tests": [],
             "settings": settings_json(settings, config)}
    write_bundle(state, None, "fleet check", Conviction(RUN, [], [], action, fleet))
    assert bundle_path(state, node, RUN).is_file()


@pytest.mark.slow
@pytest.mark.timeout(480)  # 183 s beside the broken-and-slow check; the full suite's load at its start is more
def test_a_passing_retest_lifts_a_failing_one_keeps_and_a_persons_drain_is_untouched(fabric, tmp_path: Path):
    state = tmp_path / "state"
    for node in ("f1", "f5"):
        _convicted(state, node)
        scontrol(fabric, "update", f"nodename={node}", "state=drain", f"reason=gpuval: FLEET_SLOW {RUN}")
    scontrol(fabric, "update", "nodename=f2", "state=drain", f"reason={PERSON}")
    env = {**fabric.env, "GPUVAL_JOBS_DIR": str(tmp_path / "jobs"), "GPUVAL_STATE_DIR": str(state)}

    proc = run_gpuval("fleet", "retest", "--on", "slurm", "--opt", "partition=fleet", "--partners", "f4,f6",
                      "--json", "--poll", "1", env=env, timeout=450)

    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    actions = {a["node"]: (a["verdict"], a["action"]) for a in out["actions"]}
    assert actions == {"f1": ("pass", "lifted"), "f5": ("fail", "kept drained")}, out["actions"]
    assert "drain" not in _state(fabric, "f1")[0].lower()
    assert _state(fabric, "f5") == ("IDLE+DRAIN", f"gpuval: FLEET_SLOW {RUN}")  # drained again, with its reason
    assert _state(fabric, "f2")[1] == PERSON and "DRAIN" in _state(fabric, "f2")[0]
    assert "No reservations" in scontrol(fabric, "show", "reservation")
    used = [int(n) for job in (tmp_path / "jobs").rglob("job.sbatch")
            for n in re.findall(r"rank-test .*--samples (\d+)", job.read_text())]
    assert used and max(used) <= 32  # the bundle's --max-samples bounds the re-test's pair tests
    [check] = out["checks"]
    assert {n["host"] for n in check["nodes"]} == {"f1", "f4", "f5", "f6"} and check["actions"] == []
