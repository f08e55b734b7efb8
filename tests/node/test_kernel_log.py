"""Logs with their times: each format a published log was saved in (tests/data/kernel-log/SOURCE.md), the window,
`--since`, /dev/kmsg as this machine has it, the journalctl -k fallback (a real process standing in for
journalctl, printing journalctl's own short-unix format) and the pass mark."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.node.kernel_log import (
    SINCE_BOOT, PassMark, boot_from_proc, in_window, parse_line, parse_since, read_files, read_kmsg,
)
from gpuval.node.machine import HardwareUnavailable
from gpuval.node.sysfs import LinuxMachine
from tests.conftest import DATA
from tests.node.tools import fake_tool, only_on_path

LOGS = DATA / "kernel-log"
UTC = timezone.utc
BOOT = datetime(2024, 7, 28, 9, 0, tzinfo=UTC)


def lines(name: str, boot: datetime | None = None, now: datetime | None = None):
    return [parse_line(raw, boot, now) for raw in (LOGS / name).read_text().splitlines()]


def test_dmesg_T_lines_carry_local_wall_clock(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    first = lines("dmesg-T-xid43-31-94.txt")[4]
    assert "Xid (PCI:0000:00:05): 43" in first.text
    assert first.at == datetime(2024, 7, 31, 23, 14, 18, tzinfo=UTC)


def test_plain_dmesg_is_placed_from_boot_and_rfc3339_reads_nanoseconds():
    sxid = lines("dmesg-xid79-sxid20034-gpud.txt", BOOT)
    assert sxid[2].at == BOOT + timedelta(seconds=6781741.548779)
    assert lines("dmesg-xid79-sxid20034-gpud.txt")[2].at is None  # no boot known: no time, never a guess
    talos = lines("talos-xid154.txt")[-1]
    assert talos.at == datetime(2026, 4, 22, 21, 30, 51, 870495, tzinfo=UTC)


def test_dmesg_iso_time_with_a_comma_keeps_its_zone_and_fraction(monkeypatch):
    """`dmesg --decode --time-format iso` writes a comma before the microseconds (gpud's capture): the zone that
    follows is the line's own, whatever this machine's TZ."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        first = lines("dmesg-iso-xid13-burst-gpud.log")[0]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert "Xid (PCI:0000:38:00): 13" in first.text
    assert first.at == datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC)


def test_a_saved_kmsg_file_is_read_whole_lines_across_reads(tmp_path: Path):
    """A plain file read as /dev/kmsg (a root that is a copy of a node) comes in pieces of several kB: a line cut
    by a piece's end is joined, not read as two broken lines (300 Xid 95 lines, 35 kB)."""
    from gpuval.node.xid_lines import xids

    records = read_kmsg(LOGS / "kmsg-xid95-burst.txt", BOOT)
    assert len(records) == 303 and sum(x.xid == 95 for x in xids(records)) == 300
    assert all(line.at is not None for line in records)
    split = tmp_path / "kmsg"
    split.write_bytes("6,1,1,-;NVRM: Xid (PCI:0000:01:00): 95, \u00e9\n".encode() * 2000)  # a 2-byte char on a cut
    assert {line.text for line in read_kmsg(split, BOOT)} == {"NVRM: Xid (PCI:0000:01:00): 95, \u00e9"}


def test_syslog_year_is_the_closest_to_now(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    now = datetime(2026, 1, 10, tzinfo=UTC)  # August is closer in 2025 than in 2026
    flap = lines("syslog-6-flaps-aznhc", now=now)[2]
    assert flap.at == datetime(2025, 8, 17, 6, 18, 1, tzinfo=UTC) and "ib6: lost carrier" in flap.text
    journal = lines("journalctl-k-format.txt", now=datetime(2026, 6, 1, tzinfo=UTC))[0]
    assert journal.at == datetime(2026, 5, 27, 16, 50, 10, tzinfo=UTC)


def test_a_line_without_time_stays_in_every_window():
    undated = lines("journal-xid45.txt")
    assert all(line.at is None for line in undated)
    assert len(in_window(undated, datetime(2030, 1, 1, tzinfo=UTC))) == len(undated)
    dated = lines("dmesg-T-xid43-31-94.txt")
    kept = in_window(dated, datetime(2024, 8, 5, tzinfo=UTC))
    assert kept[0].at is None and kept[0].text.startswith("root@node4")  # the shell prompt line has no time
    assert [line.text[:26] for line in kept[1:]] == ["[Mon Aug  5 03:54:13 2024]"] * 3 + ["[Fri Aug  9 13:32:56 2024]"] * 3


def test_since_values():
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    assert parse_since("boot") is SINCE_BOOT
    assert parse_since("24h", now) == now - timedelta(hours=24)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("7d", now) == now - timedelta(days=7)
    assert parse_since("2026-11-23T10:00") == datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    assert parse_since("2026-11-23T10:00+01:00").utcoffset() == timedelta(hours=1)
    with pytest.raises(ValueError, match="give 'boot', a span such as 24h"):
        parse_since("yesterday")


def test_kmsg_records_get_their_time_from_boot(tmp_path: Path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1020,5162000,-;NVRM: Xid (PCI:0001:00:00): 79, pid=0, GPU has fallen off the bus.\n")
    [line] = read_kmsg(kmsg, BOOT)
    assert line.text.startswith("NVRM: Xid") and line.at == BOOT + timedelta(seconds=5.162)


def test_this_machine_kmsg_and_boot_time():
    """This sandbox's own /dev/kmsg (root here) and /proc/stat."""
    boot = boot_from_proc(Path("/"))
    assert boot < datetime.now(UTC)
    window = LinuxMachine().kernel_messages(None)
    assert window.source == "/dev/kmsg" and window.lines and all(line.at and line.at >= boot for line in window.lines)
    later = LinuxMachine().kernel_messages(datetime.now(UTC) + timedelta(hours=1))
    assert later.lines == []


def test_journalctl_is_read_when_kmsg_is_closed(tmp_path: Path, monkeypatch):
    """kernel.dmesg_restrict=1 closes /dev/kmsg to a user; journalctl -k (group adm) still answers."""
    only_on_path(monkeypatch, tmp_path / "bin")
    fake_tool(tmp_path / "bin", "journalctl", 'echo "$@" > "${0%/*}/args"\n'
              "echo '1732370058.123456 node4 kernel: NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread'")
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc/stat").write_text("cpu 1 2 3\nbtime 1732300000\n")
    since = datetime(2024, 11, 23, 12, 0, tzinfo=UTC)
    window = LinuxMachine(root).kernel_messages(since)  # no dev/kmsg under this root: closed
    assert window.source == "journalctl -k" and "No such file" in window.notes[0]
    [line] = window.lines
    assert "Xid (PCI:0000:00:05): 43" in line.text and line.at == datetime.fromtimestamp(1732370058.123456, UTC)
    args = (tmp_path / "bin/args").read_text().split()
    assert args[:3] == ["--no-pager", "-o", "short-unix"] and "-k" in args and f"--since=@{since.timestamp():.0f}" in args


def test_no_kmsg_and_no_journal_is_one_error(tmp_path: Path, monkeypatch):
    """journalctl without a journal (this sandbox, containers) exits 0 and says so on stderr: not an empty log."""
    only_on_path(monkeypatch, tmp_path / "bin")
    fake_tool(tmp_path / "bin", "journalctl", "echo 'No journal files were found.' >&2; echo '-- No entries --'")
    with pytest.raises(HardwareUnavailable, match="cannot read the kernel log: .*No such file.*No journal files"):
        LinuxMachine(tmp_path).kernel_messages(None)
    only_on_path(monkeypatch, tmp_path / "empty")
    with pytest.raises(HardwareUnavailable, match="journalctl is not installed"):
        LinuxMachine(tmp_path).kernel_messages(None)


def test_link_events_from_syslog_files(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    (tmp_path / "var/log").mkdir(parents=True)
    (tmp_path / "var/log/syslog").write_text((LOGS / "syslog-6-flaps-aznhc").read_text())
    found, read = read_files([tmp_path / "var/log/syslog"], datetime(2025, 8, 16, tzinfo=UTC),
                             now=datetime(2025, 8, 17, 12, 0, tzinfo=UTC), contains="carrier")
    assert read == [str(tmp_path / "var/log/syslog")]
    assert sum("lost carrier" in line.text for line in found) == 6 and len(found) == 12


def test_pass_mark_round_trip(tmp_path: Path):
    mark = PassMark(tmp_path / "state" / "xid-pass")
    assert mark.read() is None
    when = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    assert mark.write(when) is None and mark.read() == when
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:
        problem = PassMark(tmp_path / "ro" / "sub" / "xid-pass").write(when)
    finally:
        (tmp_path / "ro").chmod(0o700)
    assert problem is None or "could not record the pass" in problem  # root may write anyway
