"""The driver's error lines in published kernel logs (tests/data/kernel-log/SOURCE.md): Xids, Xid 154's recovery
action, and NVSwitch SXids (the Fatal / Non-fatal line is the event; severity and data lines belong to it)."""

from __future__ import annotations

from gpuval.node.kernel_log import parse_line
from gpuval.node.xid_lines import sxids, xids
from tests.conftest import DATA

LOGS = DATA / "kernel-log"


def read(name: str):
    return [parse_line(raw) for raw in (LOGS / name).read_text().splitlines()]


def test_xids_of_dmesg_T_journal_and_ctime_captures():
    assert [(x.pci, x.xid) for x in xids(read("dmesg-T-xid43-31-94.txt"))] == [
        ("0000:00:05", 43), ("0000:00:05", 43), ("0000:00:07", 31), ("0000:00:08", 94)]
    # "caused by previous Xid 149" names another Xid in the text: only the event's own code counts
    assert {x.xid for x in xids(read("journal-xid45.txt"))} == {45}
    assert [(x.pci, x.xid) for x in xids(read("dmesg-ctime-xid119-gpud.log"))][0] == ("0000:9b:00", 119)


def test_xid_154_names_the_recovery_action():
    [x] = xids(read("talos-xid154.txt"))
    assert (x.xid, x.recovery_action, x.recovery_text) == (154, 1, "GPU Reset Required")
    assert x.line.at is not None


def test_sxid_events_are_the_fatal_and_non_fatal_lines():
    found = sxids(read("dmesg-xid79-sxid20034-gpud.txt"))
    assert [(s.switch, s.pci, s.sxid, s.fatal) for s in found] == [
        ("nvidia-nvswitch1", "0000:06:00.0", 20034, True), ("nvidia-nvswitch0", "0000:05:00.0", 20034, True),
        ("nvidia-nvswitch2", "0000:07:00.0", 20034, True), ("nvidia-nvswitch0", "0000:05:00.0", 20034, True)]
    assert [x.xid for x in xids(read("dmesg-xid79-sxid20034-gpud.txt"))] == [79]
    non_fatal = parse_line("[2397170.1] nvidia-nvswitch3: SXid (PCI:0000:8a:00.0): 12028, Non-fatal, Link 32 egress "
                           "non-posted PRIV error (First)")  # the shape Imbue's doctests quote
    [s] = sxids([non_fatal])
    assert (s.sxid, s.fatal) == (12028, False)
