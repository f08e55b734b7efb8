"""The suggested action in a drain reason: a failed record's `details.action` (the Xid catalog's reset-gpu,
reboot) follows the fault codes and run id as "; action A", short and inert, and never changes which codes the
reason stands for. Through the real scontrol against real daemons (tests/helpers/slurm_session.py), fed by real
`gpuval health` runs on the recorded A100 machine with an Xid 79 in its kernel log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuval.engines.slurm.nodes import read_node
from gpuval.operate.codes import Acted
from gpuval.operate.node_state import drain_codes, drain_reason, suggested_actions
from gpuval.results.model import Result, Status, Where
from tests.operate.support import act_on_records, recorded_health

RUN = "20261123T154437Z-de31a1"
XID_79 = "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _record(status: Status, action: object = None, code: str = "XID_ERROR") -> Result:
    details = {} if action is None else {"action": action}
    return Result(run_id="r", kind="health", name="xid", where=Where(hostname="n1"), status=status,
                  data={"fault_code": code, "details": details})


def test_the_action_follows_the_run_id_short_and_inert():
    assert drain_reason(["XID_ERROR", "ECC_ERRORS"], RUN, ["reboot", "reset-gpu"]) == \
        f"gpuval: XID_ERROR ECC_ERRORS {RUN}; action reboot reset-gpu"
    assert drain_reason(["XID_ERROR"], RUN, ["Reset the GPU\n", "rm -rf /", "x" * 30, "a;b"]) == \
        f"gpuval: XID_ERROR {RUN}"  # not a token of the catalog's shape: left out, never cleaned into one
    assert drain_codes(f"gpuval: XID_ERROR ECC_ERRORS {RUN}; action reboot") == ["XID_ERROR", "ECC_ERRORS"]
    assert drain_codes(f"gpuval: XID_ERROR +3 {RUN}; action reboot") is None
    assert drain_codes(f"gpuval: XID_ERROR {RUN}") == ["XID_ERROR"]  # a reason written before actions


def test_only_failed_records_suggest_an_action():
    records = [_record(Status.FAIL, "reboot"), _record(Status.WARN, "restart-app"), _record(Status.FAIL, "reboot"),
               _record(Status.FAIL, ["reset-gpu"]), _record(Status.FAIL, "reset-gpu", "ECC_ERRORS"),
               _record(Status.FAIL, "check-mechanics"), _record(Status.FAIL)]
    assert suggested_actions(records) == ["reboot", "reset-gpu"]  # at most two, in record order


def test_an_xid_79_drains_with_its_action_and_a_pass_lifts_it(cluster, tmp_path: Path):
    failing = recorded_health(tmp_path, name="bad", kernel_log=[XID_79])
    [xid] = [r for r in failing if r.name == "xid"]
    assert xid.status is Status.FAIL and xid.data.details["action"] == "reboot"
    action = act_on_records(failing, "n2", tmp_path / "state")
    reason = f"gpuval: XID_ERROR {failing[0].run_id}; action reboot"
    assert action.action == Acted.DRAINED and read_node("n2").reason == reason
    listing = subprocess.run(["sinfo", "-R", "-h", "-o", "%N|%E"], capture_output=True, text=True, check=True)
    assert f"n2|{reason}" in listing.stdout  # what an admin sees: what failed, which run, what to do
    lifted = act_on_records(recorded_health(tmp_path, name="good", kernel_log=[]), "n2", tmp_path / "state")
    assert lifted.action == Acted.RESUMED and not read_node("n2").drained
