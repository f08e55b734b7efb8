"""A node's driver events since a moment, on recorded nodes with published kernel logs
(tests/data/kernel-log/SOURCE.md): Xids with the memory (ECC) ones marked, SXids with their own fatal word, a
window that narrows, undated lines counted, and a log that cannot be read said (never "no events")."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuval.node.node_events import events_since
from tests.conftest import DATA
from tests.health_support import A100, machine, no_imds, unreadable  # noqa: F401

UTC = timezone.utc


def _dated(data):
    """akash#244's dmesg -T log: Xid 43 (Jul 31), 31 (Aug 5), 94 (Aug 9 2024), on a node booted Jul 28."""
    data["kernel_log"] = (DATA / "kernel-log" / "dmesg-T-xid43-31-94.txt").read_text().splitlines()
    data["boot_time"] = "2024-07-28T09:15:00+00:00"
    data["now"] = "2024-08-10T00:00:00+00:00"


def test_xids_since_a_job_started_with_the_ecc_one_marked(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    node = machine(A100, _dated)
    all_of_boot = events_since(node, None)
    assert [(e.kind, e.code) for e in all_of_boot.events] == [("xid", 43), ("xid", 43), ("xid", 31), ("xid", 94)]
    assert [e.code for e in all_of_boot.ecc] == [94] and all_of_boot.ecc[0].ecc == "contained ECC error"
    job = events_since(node, datetime(2024, 8, 5, tzinfo=UTC))
    assert [e.code for e in job.events] == [31, 94] and job.events[0].pci == "0000:00:07"
    assert job.events[0].at == datetime(2024, 8, 5, 3, 54, 13, tzinfo=UTC) and job.problem == ""
    assert events_since(node, datetime(2024, 8, 9, 14, tzinfo=UTC)).events == []


def test_sxids_say_whether_they_are_fatal_and_undated_lines_are_counted():
    def gpud(data):
        data["kernel_log"] = (DATA / "kernel-log" / "dmesg-xid79-sxid20034-gpud.txt").read_text().splitlines()
        data.pop("boot_time", None)

    found = events_since(machine(A100, gpud), datetime(2024, 1, 1, tzinfo=UTC))
    assert [(e.kind, e.code) for e in found.events][:1] == [("xid", 79)]
    sxids = [e for e in found.events if e.kind == "sxid"]
    assert len(sxids) == 4 and all(e.fatal for e in sxids) and {e.code for e in sxids} == {20034}
    assert any("carry no time" in note for note in found.notes)


def test_a_log_that_cannot_be_read_is_said():
    found = events_since(machine(A100, unreadable("kernel_messages", "/dev/kmsg: Permission denied")), None)
    assert found.events == [] and "could not read the kernel log" in found.problem and "Permission" in found.problem


def test_events_are_bounded_however_many_distinct_codes_a_log_holds():
    """Codes (on a device) are counted apart up to MAX_CODES (the rarest past it are summed in a note), each with its
    last few events: a log of 500 distinct made-up codes, 3 lines each, still gives a small answer with every event
    counted."""
    from gpuval.node.node_events import MAX_CODES, PER_CODE

    def many(data):
        data["kernel_log"] = [f"[Mon Aug  5 03:00:{n % 60:02d} 2024] NVRM: Xid (PCI:0000:19:00): {code}, pid={n}, x"
                              for code in range(1000, 1500) for n in range(3)]
        data["boot_time"], data["now"] = "2024-08-05T00:00:00+00:00", "2024-08-05T06:00:00+00:00"

    found = events_since(machine(A100, many), None)
    assert found.total == 1500 and len(found.counts) == MAX_CODES and len(found.events) <= MAX_CODES * PER_CODE
    assert any(f"{500 - MAX_CODES} more code(s)" in note for note in found.notes)


def test_an_answer_of_an_older_gpuval_is_counted_when_read():
    """A node whose gpuval predates the counts (an older one in a job's container) sends its events as a list:
    read back, they are counted, so the diagnosis still says how many there were."""
    from gpuval.node.node_events import NodeEvents

    older = {"since": None, "events": [{"kind": "xid", "code": 94, "pci": "0000:19:00", "at": None, "text": "x",
                                        "ecc": "contained ECC error"}] * 4}
    found = NodeEvents.model_validate(older)
    assert found.total == 4 and found.ecc_total == 4 and len(found.events) == 3
