"""Whose drain a Slurm reason is: gpuval's only when it has gpuval's whole shape (`gpuval: CODES RUN`, at least one
code of the fault-code alphabet, a run id of gpuval's own shape, optionally `; action ...`). A person's reason that
merely starts with "gpuval:" (an RMA ticket) is a person's: never lifted, never rewritten. Pure rules first, then
the review's reproducer on real Slurm (tests/operate/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuval.operate.codes import Acted
from gpuval.engines.nodes import SlurmNode
from gpuval.engines.slurm.nodes import SlurmNodes, read_node
from gpuval.errors import UsageError
from gpuval.operate.node_state import apply, decide, drain_codes, drain_reason, ours
from gpuval.results.model import Status, is_run_id, new_run_id
from tests.operate.support import recorded_machine
from tests.conftest import run_gpuval

RUN = "20261126T000000Z-f1ee70"


@pytest.mark.parametrize("reason", [
    "gpuval: RMA-ticket-4711-do-not-resume",       # one word: no code at all
    "gpuval: RMA ticket-4711",                     # a run id of no gpuval shape
    "gpuval: replace fan 3 20261126T000000Z-f1ee70",  # words that are no fault codes
    "gpuval:ECC_ERRORS 20261126T000000Z-f1ee70",   # no space after the prefix
    "gpuval: ECC_ERRORS 20261126T000000Z-f1ee70; call vendor",  # "; action" is the only tail gpuval writes
    "gpuval: ECC_ERRORS 20261126T000000Z-f1ee70 extra",
])
def test_a_reason_that_only_starts_with_the_prefix_is_a_persons(reason):
    node = SlurmNode("n1", "IDLE+DRAIN", reason)
    assert drain_codes(reason) is None and not ours(node)
    assert decide(Status.PASS, node)[0] is Acted.UNCHANGED and decide(Status.FAIL, node)[0] is Acted.UNCHANGED


def test_gpuvals_own_reasons_keep_their_shape():
    for codes, actions in ((["ECC_ERRORS"], ()), (["FLEET_SLOW", "XID_ERROR"], ("reboot",)),
                           ([f"CODE_{i}" for i in range(9)], ("reset-gpu", "reboot"))):
        reason = drain_reason(codes, RUN, actions)
        assert ours(SlurmNode("n1", "IDLE+DRAIN", reason)), reason
    assert drain_codes(drain_reason(["FLEET_SLOW", "XID_ERROR"], RUN, ("reboot",))) == ["FLEET_SLOW", "XID_ERROR"]
    assert drain_codes(drain_reason([f"CODE_{i}" for i in range(9)], RUN)) is None  # "+3": a person lifts it
    assert drain_reason(["ecc errors", "imported_check"], RUN) == f"gpuval: ECCERRORS IMPORTED_CHECK {RUN}"


def test_a_run_id_of_no_gpuval_shape_is_refused_before_any_node_action():
    assert is_run_id(new_run_id()) and is_run_id(RUN)
    assert not is_run_id("r1") and not is_run_id("ticket-4711") and not is_run_id(RUN + "\n")
    with pytest.raises(UsageError, match="gpuval's own run id"):
        apply(Status.FAIL, "n1", "ticket-4711", ["ECC_ERRORS"], SlurmNodes())


def test_new_run_id_keeps_only_a_run_id_of_gpuvals_shape(monkeypatch):
    monkeypatch.setenv("GPUVAL_RUN_ID", RUN)
    assert new_run_id() == RUN
    monkeypatch.setenv("GPUVAL_RUN_ID", "ticket-4711")
    assert new_run_id() != "ticket-4711" and is_run_id(new_run_id())


def test_a_persons_rma_drain_is_never_lifted_by_a_quick_pass(cluster, tmp_path: Path):
    """The review's reproducer: an admin's `gpuval: RMA-ticket-4711-do-not-resume`, then a healthy quick pass."""
    reason = "gpuval: RMA-ticket-4711-do-not-resume"
    cluster.scontrol("update", "nodename=n1", "state=drain", f"reason={reason}")
    try:
        proc = run_gpuval("health", "--quick", "--recorded", str(recorded_machine(tmp_path, "good")), "--node", "n1",
                          "--scheduler", "slurm", "--drain")
        assert proc.returncode == 0 and "drained by someone else" in proc.stdout, proc.stdout + proc.stderr
        node = read_node("n1")
        assert node.drained and node.reason == reason
    finally:
        cluster.scontrol("update", "nodename=n1", "state=resume")
