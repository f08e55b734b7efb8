"""Slurm drain and resume through the real scontrol against real daemons (slurmctld, two slurmd as nodes n1 and
n2, munged; tests/helpers/slurm_session.py), fed by real `gpuval health` runs on a recorded A100 machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuval.engines import node_client
from gpuval.errors import EngineError, UsageError
from gpuval.operate.brake import drained_by_gpuval
from gpuval.operate.codes import Acted
from gpuval.operate.node_state import apply
from gpuval.engines.slurm.nodes import parse_node, read_node
from gpuval.operate.node_state import decide, ours
from gpuval.results.model import Status
from tests.helpers.records import record
from tests.operate.support import act_on_records, recorded_health


SLURM = node_client("slurm")  # scontrol on the PATH the cluster fixture sets
RUNS = [f"20261123T1347{i:02d}Z-0000{i:02d}" for i in range(4)]  # run ids of gpuval's shape


def test_an_admin_drained_node_stays_drained_after_a_passing_run(cluster, tmp_path: Path):
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=admin: replace fan 3 [ticket 42]")
    action = act_on_records(recorded_health(tmp_path), "n1", tmp_path / "state")
    # the recorded A100 passes every check that applies (default application clocks do not cap boost: no warning)
    assert (action.action, action.verdict) == (Acted.UNCHANGED, Status.PASS)
    node = read_node("n1")
    assert node.drained and node.reason == "admin: replace fan 3 [ticket 42]"


def test_a_failing_machine_drains_its_node_and_a_later_pass_resumes_it(cluster, tmp_path: Path):
    failing = recorded_health(tmp_path, ecc_errors=4, name="bad")
    action = act_on_records(failing, "n2", tmp_path / "state")
    node = read_node("n2")
    assert action.action == Acted.DRAINED and node.drained
    assert node.reason == f"gpuval: ECC_ERRORS {failing[0].run_id}"
    assert not read_node("n1").drained  # only the named node
    # What an admin sees: sinfo -R lists the reason with the run id that finds the records.
    listing = subprocess.run(["sinfo", "-R", "-h", "-o", "%N|%E"], capture_output=True, text=True, check=True)
    assert f"n2|gpuval: ECC_ERRORS {failing[0].run_id}" in listing.stdout

    action = act_on_records(recorded_health(tmp_path, name="good"), "n2", tmp_path / "state")
    node = read_node("n2")
    assert action.action == Acted.RESUMED and not node.drained and node.reason == ""


def test_error_never_drains_nor_resumes(cluster, tmp_path: Path):
    apply(Status.FAIL, "n1", RUNS[1], ["XID_ERROR"], SLURM)
    could_not_run = [record(Status.PASS, run=RUNS[0], name="gpu_count", code="ECC_ERRORS"),
                     record(Status.ERROR, run=RUNS[0], code="ECC_ERRORS")]
    for node in ("n1", "n2"):
        action = act_on_records(could_not_run, node, tmp_path / "state")
        assert (action.action, action.verdict) == (Acted.UNCHANGED, Status.ERROR)
        assert "could not run" in action.detail
    assert read_node("n1").reason == f"gpuval: XID_ERROR {RUNS[1]}"  # gpuval's drain stays: nothing was judged
    assert not read_node("n2").drained


def test_a_node_another_tool_drained_is_never_resumed_nor_relabelled(cluster):
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=NHC: check_hw_ib: no active port")
    assert apply(Status.PASS, "n2", RUNS[2], [], SLURM).action == Acted.UNCHANGED
    assert apply(Status.FAIL, "n2", RUNS[3], ["IB_PORT_DOWN"], SLURM).action == Acted.UNCHANGED
    node = read_node("n2")
    assert node.drained and node.reason == "NHC: check_hw_ib: no active port"


def test_a_persons_note_after_gpuvals_reason_keeps_the_drain(cluster):
    """A person who adds a hold to gpuval's drain ('... Hold=RMA-4711 do not resume') owns it: scontrol's reason is
    read whole, as the census (sinfo) reads it, where it was cut at ' Hold=' to gpuval's shape and lifted by a pass."""
    held = f"gpuval: ECC_ERRORS {RUNS[0]} Hold=RMA-4711 do not resume"
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={held}")
    assert read_node("n1").reason == held
    assert "n1" not in [n.name for n in drained_by_gpuval(SLURM).held]  # the census: not gpuval's either
    assert apply(Status.PASS, "n1", RUNS[1], [], SLURM).action == Acted.UNCHANGED
    assert read_node("n1").drained


def test_reason_is_inert_and_the_node_is_one_name(cluster):
    with pytest.raises(UsageError, match="gpuval's own run id"):
        apply(Status.FAIL, "n1", 'r1"; rm -rf /\n', ["ECC_ERRORS"], SLURM)
    action = apply(Status.FAIL, "n1", RUNS[1], ["ECC\nERRORS", "X'$(reboot)", "`id`", ""], SLURM)
    assert action.action == Acted.DRAINED
    assert read_node("n1").reason == f"gpuval: ECCERRORS XREBOOT ID {RUNS[1]}"
    with pytest.raises(UsageError, match="one node name"):
        apply(Status.FAIL, "n1,n2", RUNS[2], ["X"], SLURM)
    with pytest.raises(UsageError, match="one node name"):
        apply(Status.FAIL, "n[1-2]", RUNS[2], ["X"], SLURM)
    assert not read_node("n2").drained
    with pytest.raises(EngineError, match="scontrol show node"):
        apply(Status.FAIL, "n9", RUNS[3], ["X"], SLURM)


def test_decide_reads_the_flags_scontrol_prints():
    """Pure: the ownership rule on the state and reason lines scontrol prints (22.05 format)."""
    line = ("NodeName=n1 Arch=x86_64 State=MIXED+DRAIN ThreadsPerCore=1 Partitions=debug "
            "Reason=gpuval: XID_ERROR 20261123T134729Z-000001 [root@2026-11-23T13:47:29] Comment=rack 4")
    node = parse_node("n1", line)
    assert (node.state, node.reason, node.drained, ours(node)) == ("MIXED+DRAIN", "gpuval: XID_ERROR 20261123T134729Z-000001", True, True)
    assert decide(Status.WARN, node)[0] is Acted.RESUMED
    held = decide(Status.PASS, node, hold="the last full check (r0) failed")  # a quick pass after a full fail
    assert held == (Acted.UNCHANGED,
                    "gpuval's drain ('gpuval: XID_ERROR 20261123T134729Z-000001') kept: the last full check (r0) failed")
    assert decide(Status.FAIL, node, hold="x")[0] is Acted.DRAINED
    noted = parse_node("n1", "NodeName=n1 State=IDLE+DRAIN Reason=gpuval: XID_ERROR 20261123T134729Z-000001 "
                       "Hold=RMA-4711 Extra=x [root@2026-11-23T13:47:29] Comment=rack 4")
    assert noted.reason == "gpuval: XID_ERROR 20261123T134729Z-000001 Hold=RMA-4711 Extra=x" and not ours(noted)
    down = parse_node("n2", "NodeName=n2 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026-01-01T00:00:00]")
    assert decide(Status.FAIL, down)[0] is Acted.UNCHANGED and decide(Status.PASS, down)[0] is Acted.UNCHANGED
    assert decide(Status.SKIPPED, parse_node("n3", "NodeName=n3 State=IDLE"))[0] is Acted.UNCHANGED
