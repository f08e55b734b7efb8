"""Slurm drain and resume through the real scontrol against real daemons (slurmctld, two slurmd as nodes n1 and
n2, munged; tests/helpers/slurm_session.py), fed by real `gpuval health` runs on a recorded A100 machine."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuval.engines import node_client
from gpuval.errors import EngineError, UsageError
from gpuval.engines.nodes import WindowMark, window_mark
from gpuval.operate.brake import _Gpuval, drained_by_gpuval
from gpuval.operate.codes import Acted
from gpuval.operate.node_state import apply
from gpuval.engines.slurm.nodes import census_of, parse_node, read_node
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


def _shown(state: str, *lines: str) -> str:
    """`scontrol show node NAME` as Slurm 22.05 prints it (no -o): its fields on lines, the reason, the comment and
    Extra each on one of its own."""
    return "\n".join(["NodeName=n1 Arch=x86_64 CoresPerSocket=1 ", "   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.10",
                      f"   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
                      "   Partitions=debug ", "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
                      *lines, "", ""])


def test_decide_reads_the_flags_scontrol_prints():
    """Pure: the ownership rule on the state, reason and comment lines scontrol prints (22.05 format)."""
    node = parse_node("n1", _shown("MIXED+DRAIN", "   Reason=gpuval: XID_ERROR 20261123T134729Z-000001 "
                                   "[root@2026-11-23T13:47:29]", "   Comment=rack 4"))
    assert (node.state, node.reason, node.drained, ours(node), node.comment) == (
        "MIXED+DRAIN", "gpuval: XID_ERROR 20261123T134729Z-000001", True, True, "rack 4")
    assert decide(Status.WARN, node)[0] is Acted.RESUMED
    held = decide(Status.PASS, node, hold="the last full check (r0) failed")  # a quick pass after a full fail
    assert held == (Acted.UNCHANGED,
                    "gpuval's drain ('gpuval: XID_ERROR 20261123T134729Z-000001') kept: the last full check (r0) failed")
    assert decide(Status.FAIL, node, hold="x")[0] is Acted.DRAINED
    noted = parse_node("n1", _shown("IDLE+DRAIN", "   Reason=gpuval: XID_ERROR 20261123T134729Z-000001 "
                                    "Hold=RMA-4711 Extra=x [root@2026-11-23T13:47:29]", "   Comment=rack 4"))
    assert noted.reason == "gpuval: XID_ERROR 20261123T134729Z-000001 Hold=RMA-4711 Extra=x" and not ours(noted)
    down = parse_node("n2", _shown("DOWN+NOT_RESPONDING", "   Reason=Not responding [slurm@2026-01-01T00:00:00]"))
    assert decide(Status.FAIL, down)[0] is Acted.UNCHANGED and decide(Status.PASS, down)[0] is Acted.UNCHANGED
    assert decide(Status.SKIPPED, parse_node("n3", _shown("IDLE")))[0] is Acted.UNCHANGED


def test_a_persons_comment_is_never_read_into_the_reason_and_is_read_whole():
    """Pure: on one `-o` line a comment after the reason ('see Reason=x [a@b]') was read into it, and gpuval took
    its own drain for a person's; on scontrol's lines each is its own, a comment of several lines whole."""
    node = parse_node("n1", _shown("IDLE+DRAIN", "   Reason=gpuval: ECC_ERRORS 20261123T134729Z-000001 "
                                   "[root@2026-11-23T13:47:29]", "   Comment=see Reason=x [a@b]", "rack 4 | bay 2",
                                   "   Extra=e1"))
    assert (node.reason, node.comment, ours(node)) == ("gpuval: ECC_ERRORS 20261123T134729Z-000001",
                                                       "see Reason=x [a@b]\nrack 4 | bay 2", True)
    assert parse_node("n1", _shown("IDLE", "   Comment=Reason=gpuval: X 20261123T134729Z-000001")).reason == ""


def test_the_census_reads_every_reason_and_comment_whole_and_a_window_note_as_held():
    """Pure: sinfo's listing with each field ended by the call's own separator: a reason or comment holding '|' or
    a newline (a forged line among them) is read whole; a node lifted into a re-test window (not drained, gpuval's
    note in its comment) is held, with the note's reason, time and window, the comment it replaced kept in it."""
    end = "|9f3ac01be42d77e1|"
    since = datetime(2026, 11, 29, 0, 31, 44, tzinfo=timezone.utc)
    note = WindowMark("gpuval-retest-20261129T003100Z-91c485", since, f"gpuval: FLEET_NODE_CRASH {RUNS[0]}",
                      "rack 4 | bay 2\nf9|idle+drain|Unknown|(null)|gpuval: X r")
    assert window_mark(note.text()) == note and window_mark("rack 4") is None
    rows = [("f1", "idle", "Unknown", note.text(), "none"),
            ("f2", "idle+drain", "2026-11-29T00:20:00", "(null)", f"gpuval: ECC_ERRORS {RUNS[1]}"),
            ("f3", "idle+drain", "2026-11-29T00:21:00", "a|b", f"x|gpuval: ECC_ERRORS {RUNS[2]}"),
            ("f4", "idle", "Unknown", note.text().replace("gpuval: FLEET", "RMA: FLEET"), "none"),
            ("f5", "idle+drain", "2026-11-29T00:22:00", note.text(), "RMA-4711")]
    listing = "".join("".join(f + end for f in row) + "\n" for row in rows)
    census = census_of(listing, end, _Gpuval())
    assert census.nodes == 5
    assert [(h.name, h.why, h.since, h.window) for h in census.held] == [
        ("f1", note.reason, since, note.window),
        ("f2", f"gpuval: ECC_ERRORS {RUNS[1]}", datetime.fromisoformat("2026-11-29T00:20:00").astimezone(), "")]
    with pytest.raises(EngineError, match="not 5 a node"):
        census_of(listing + "f6" + end, end, _Gpuval())
