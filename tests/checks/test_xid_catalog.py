"""NVIDIA's Xid catalog as gpuval carries it (checks/xid_catalog.yaml) and the triage rules on lines of published
logs (tests/data/kernel-log/SOURCE.md): every bucket maps to an action, rows read as NVIDIA's page prints them,
bursts are one finding, recurrence adds the investigatory action, Xid 154 decides for the Xids linked to it, 162
cancels 163, a solo Xid 45 is not one the driver says another Xid caused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gpuval.checks import xid_catalog
from gpuval.checks.xid_catalog import build, catalog
from gpuval.checks.xid_triage import Policy, action_of, triage
from gpuval.node.kernel_log import parse_line
from gpuval.node.xid_lines import xids
from gpuval.results.model import Status
from tests.conftest import DATA

LOGS = DATA / "kernel-log"
BOOT = datetime(2026, 5, 1, tzinfo=timezone.utc)
POLICY = Policy(burst_s=60, recur=3)


def read(name: str):
    return xids(parse_line(raw, BOOT) for raw in (LOGS / name).read_text().splitlines())


def by_code(findings):
    return {(f.pci, f.entry.code): f for f in findings}


def test_every_xid_of_the_catalog_with_its_buckets_and_source():
    book = catalog()
    assert sorted(book.entries) == list(range(1, 173))
    assert all(book.entries[c].source for c in book.entries)
    # rows as docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html prints them
    rows = {c: (e.immediate, e.investigatory, e.xid154) for c, e in book.entries.items()}
    assert rows[48] == ("WORKFLOW_XID_48", "WORKFLOW_XID_48", True)
    assert rows[79] == ("RESTART_BM", "CONTACT_SUPPORT", True)
    assert rows[94] == ("RESTART_APP", "IGNORE (sympathetic)", True)
    assert rows[95] == ("RESET_GPU", "IGNORE (sympathetic)", True)
    assert rows[119] == ("RESET_GPU", "INVESTIGATE_SW", False)
    assert rows[154][0] == "XID_154" and rows[13][:2] == ("RESTART_APP", "WORKFLOW_XID_13")
    assert book.entries[162].cancels == (163,) and "nvsentinel" in book.entries[162].source
    assert [book.immediate_of(book.entry(c)) for c in (43, 45, 74, 79, 95, 144, 154)] == [
        "none", "solo", "reset-gpu", "reboot", "reset-gpu", "severity", "recovery"]
    assert book.entry(175).action == "investigate"  # a newer driver's code: looked up, never guessed


def test_the_catalog_refuses_a_bucket_it_cannot_act_on():
    data = yaml.safe_load((Path(xid_catalog.__file__).parent / "xid_catalog.yaml").read_text())
    data["xids"][13]["immediate"] = "RUN_FIELDDIAG"
    with pytest.raises(ValueError, match="Xid 13: immediate bucket 'RUN_FIELDDIAG' maps to no action"):
        build(data)
    data["xids"][13]["immediate"], data["xids"][13]["source"] = "RESTART_APP", ["a blog"]
    with pytest.raises(ValueError, match=r"Xid 13: source \['a blog'\] is not one of"):
        build(data)


def test_a_burst_of_one_xid_is_one_finding():
    """gpud's `dmesg --time-format iso` capture: 16 Xid 13 lines on one GPU within 4 ms, then an Xid 43."""
    found = triage(read("dmesg-iso-xid13-burst-gpud.log"), POLICY, catalog())
    assert [(f.entry.code, f.count, f.bursts, f.action, f.status) for f in found] == [
        (13, 16, 1, "restart-app", Status.WARN), (43, 1, 1, "none", Status.PASS)]
    assert found[0].text(catalog()).startswith(
        "Xid 13 (Graphics Engine Exception) on PCI 0000:38:00, 16 lines: restart the application "
        "[catalog: RESTART_APP]")


def test_an_xid_that_recurred_adds_its_investigatory_action():
    """gpud's capture of Xid 119 on one H100: three lines 6 s apart, then again 3 and 6 minutes later: three
    bursts. The immediate action (reset the GPU) fails the node; the investigatory one only adds advice."""
    [xid119] = [f for f in triage(read("dmesg-ctime-xid119-gpud.log"), POLICY, catalog()) if f.entry.code == 119]
    assert (xid119.count, xid119.bursts, xid119.action, xid119.investigate, xid119.status) == (
        5, 3, "reset-gpu", "check-app", Status.FAIL)
    assert "; it recurred: check the application" in xid119.text(catalog())
    once = triage(read("dmesg-ctime-xid119-gpud.log"), Policy(burst_s=3600, recur=3), catalog())
    assert by_code(once)[("0000:9b:00", 119)].investigate == "none"  # one burst of an hour: not recurred


def test_nvlink5_xids_follow_the_severity_the_driver_prints():
    """gpud#1174's GB200 kmsg lines: NETIR Fatal (149) resets the GPU, RLW_RXPIPE Nonfatal (145) is noted."""
    found = by_code(triage(read("nvl5-xid149-145-gpud.txt"), POLICY, catalog()))
    assert found[("0019:01:00", 149)].action == found[("0000:00:00", 149)].action == "reset-gpu"
    assert (found[("0018:01:00", 145)].action, found[("0018:01:00", 145)].status) == ("none", Status.PASS)


def test_xid_154_decides_for_the_xids_linked_to_it():
    stream = read("kmsg-xid163-162-154none.txt")
    found = by_code(triage(stream, POLICY, catalog()))
    cleared = found[("0018:01:00", 95)]  # Xid 95, then 154 to GPU Reset Required, then 154 back to None
    assert (cleared.action, cleared.status) == ("none", Status.PASS)
    assert cleared.why == "the later Xid 154 on this GPU: None"
    reboot = [parse_line("4,1,1,-;NVRM: Xid (PCI:0018:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). "
                         "RST: Yes, D-RST: No", BOOT),
              parse_line("4,2,2,-;NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x0 (None) to "
                         "0x2 (Node Reboot Required)", BOOT)]
    [xid95, xid154] = triage(xids(reboot), POLICY, catalog())
    assert (xid95.action, xid95.why) == ("reboot", "the later Xid 154 on this GPU: Node Reboot Required")
    assert action_of([xid95, xid154], catalog()) == "reboot"
    before = triage(xids(reversed(reboot)), POLICY, catalog())  # a 154 before the Xid speaks not for it
    assert by_code(before)[("0018:01:00", 95)].action == "reset-gpu"


def test_162_cancels_an_earlier_163_on_the_same_gpu_only():
    found = by_code(triage(read("kmsg-xid163-162-154none.txt"), POLICY, catalog()))
    assert (found[("0008:01:00", 163)].status, found[("0008:01:00", 163)].why) == (
        Status.PASS, "cancelled by the later Xid 162")
    other = found[("0009:01:00", 163)]  # another GPU's 163 stays
    assert (other.action, other.status) == ("investigate", Status.WARN)
    assert "reload the driver or reset the GPU" in other.text(catalog())
    reversed_pair = [line for line in read("kmsg-xid163-162-154none.txt") if line.pci == "0008:01:00"][::-1]
    assert by_code(triage(reversed_pair, POLICY, catalog()))[("0008:01:00", 163)].status is Status.WARN


def test_xid_45_is_solo_only_when_no_other_xid_caused_it():
    caused = read("journal-xid45.txt")  # R590: "caused by previous Xid 149" on every line
    assert {f.action for f in triage(caused, POLICY, catalog())} == {"none"}
    alone = xids([parse_line(caused[0].line.text.split(" caused by")[0])])
    [solo] = triage(alone, POLICY, catalog())
    assert (solo.action, solo.status) == ("restart-fm", Status.WARN)
    beside = triage(alone + xids([parse_line("NVRM: Xid (PCI:0000:dc:00): 48, pid=1, name=x, DBE")]), POLICY,
                    catalog())
    assert by_code(beside)[("0000:dc:00", 45)].action == "none"  # not solo: the 48 is acted on


def test_a_sites_fatal_list_fails_what_the_catalog_would_not():
    lines = xids([parse_line("[1.0] NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM "
                             "(0x1). RST: No, D-RST: No")])
    [found] = triage(lines, Policy(60, 3, frozenset({94})), catalog())
    assert (found.action, found.status, found.why) == ("reset-gpu", Status.FAIL, "the baseline's xid.fatal list")


def test_undated_lines_are_one_burst_and_a_gap_splits_bursts():
    dated = [parse_line(f"6,{i},{int(t * 1e6)},-;NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=x, Ch 00000008", BOOT)
             for i, t in enumerate([0, 30, 89, 150, 210])]  # gaps of 30, 59, 61, 60 s
    [found] = triage(xids(dated), POLICY, catalog())
    assert (found.count, found.bursts) == (5, 3) and found.first == BOOT
    assert found.last == BOOT + timedelta(seconds=210)
    undated = [parse_line("NVRM: Xid (PCI:0000:01:00): 31, pid=1, name=x, Ch 00000008")] * 4
    assert triage(xids(undated), POLICY, catalog())[0].bursts == 1
