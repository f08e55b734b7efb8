"""The xid check's window (--since; the last pass on this machine, else boot), its pass mark, SXids known to be
harmless, Xid 154 back to "None", undated lines, and xid_during_run over a whole suite, on the recorded nodes
with published kernel logs (tests/data/kernel-log/SOURCE.md) and on this machine's own kernel log."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import all_checks, make_context, run_suite
from gpuval.node.kernel_log import SINCE_BOOT, PassMark
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.conftest import DATA
from tests.health_support import A100, H100, context, data_set, no_imds  # noqa: F401

UTC = timezone.utc
DMESG_T = (DATA / "kernel-log" / "dmesg-T-xid43-31-94.txt").read_text().splitlines()


def run(name: str, ctx):
    [result] = run_suite(ctx, [REGISTRY[name]]).results
    return result


def dated(data):
    """akash#244's dmesg -T log (Xid 43 on Jul 31, 31 on Aug 5, 94 on Aug 9 2024) on a node booted Jul 28."""
    data["kernel_log"] = DMESG_T
    data["boot_time"] = "2024-07-28T09:15:00+00:00"
    data["now"] = "2024-08-10T00:00:00+00:00"


def test_default_window_is_boot_and_since_narrows_it(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    since_boot = run("xid", context(A100, dated))
    assert since_boot.status is Status.FAIL and "since boot (2024-07-28 09:15:00 UTC)" in since_boot.reason
    assert {x["xid"] for x in since_boot.details["xids"]} == {43, 31, 94}
    after_94 = run("xid", context(A100, dated, since=datetime(2024, 8, 10, tzinfo=UTC)))
    assert after_94.status is Status.PASS and "since 2024-08-10 00:00:00 UTC (--since)" in after_94.reason
    only_31 = run("xid", context(A100, dated, since=datetime(2024, 8, 1, tzinfo=UTC)))
    assert only_31.status is Status.FAIL and {x["xid"] for x in only_31.details["xids"]} == {31, 94}
    explicit_boot = run("xid", context(A100, dated, since=SINCE_BOOT))
    assert "--since boot" in explicit_boot.reason and explicit_boot.value == 4


def test_a_pass_is_marked_and_starts_the_next_window(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    mark = PassMark(tmp_path / "xid-pass")
    clean = run("xid", context(A100, lambda d: (dated(d), d.update(kernel_log=DMESG_T[:1])), xid_mark=mark))
    assert clean.status is Status.PASS and mark.read() == datetime(2024, 8, 10, tzinfo=UTC)
    # the Xids of Aug 5 and 9 happened before that pass: the next default window leaves them out
    again = run("xid", context(A100, dated, xid_mark=mark))
    assert again.status is Status.PASS and "since the last gpuval pass (2024-08-10 00:00:00 UTC)" in again.reason
    # a failing run never moves the mark: the fault stays until a reboot or --since
    mark.write(datetime(2024, 7, 30, tzinfo=UTC))
    failing = run("xid", context(A100, dated, xid_mark=mark))
    assert failing.status is Status.FAIL and mark.read() == datetime(2024, 7, 30, tzinfo=UTC)
    # a pass from before this boot does not count
    mark.write(datetime(2024, 7, 1, tzinfo=UTC))
    assert "since boot" in run("xid", context(A100, dated, xid_mark=mark)).reason


def test_harmless_sxids_are_ignored_and_non_fatal_ones_warn():
    harmless = "[100.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 11012, Non-fatal, Link 12 MC TS crumbstore MCTO"
    non_fatal = "[101.0] nvidia-nvswitch3: SXid (PCI:0000:8a:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV"
    ignored = run("xid", context(A100, data_set("kernel_log", [harmless])))
    assert ignored.status is Status.PASS and ignored.details["harmless_sxids"] == 1
    warned = run("xid", context(A100, data_set("kernel_log", [harmless, non_fatal])))
    assert warned.status is Status.WARN and "1 non-fatal NVSwitch SXid event(s) [12028] on nvidia-nvswitch3" in warned.reason


def test_xid_154_back_to_none_is_no_finding():
    line = ("[2026-04-22T21:40:00.0Z]: NVRM: Xid (PCI:0000:0b:00): 154, GPU recovery action changed from 0x1 "
            "(GPU Reset Required) to 0x0 (None)")
    result = run("xid", context(H100, data_set("kernel_log", [line])))
    assert result.status is Status.PASS and result.value == 1


def test_undated_lines_are_counted_and_said():
    lines = (DATA / "kernel-log" / "journal-xid45.txt").read_text().splitlines()
    result = run("xid", context(H100, lambda d: d.update(kernel_log=lines, boot_time="2026-05-18T00:00:00+00:00")))
    assert result.status is Status.WARN and "7 line(s) carry no time and were all counted" in result.reason


def test_xid_during_run_spans_the_whole_suite():
    """The watch starts before the first check and is read by the last one: events of the run, once."""
    ctx = context(H100, data_set("xid_events_during_run", [{"xid": 48, "gpu": 1, "pci_bus_id": "00000002:00:00.0"}]))
    results = run_suite(ctx, all_checks()).results
    assert results[-1].name == "xid_during_run" and results[-1].status is Status.FAIL
    assert "GPU 1 (0002:00:00.0): Xid 48 x1 (nvml)" in results[-1].reason
    alone = REGISTRY["xid_during_run"].run(context(H100))
    assert alone.status is Status.SKIPPED and "no Xid watch ran" in alone.reason


def test_this_machine_kernel_log_window():
    """This sandbox: root reads /dev/kmsg, no NVIDIA driver: both Xid checks say "no NVIDIA driver", the log itself
    reads with times from boot."""
    machine = LinuxMachine()
    results = run_suite(make_context(machine, None), [REGISTRY["xid"], REGISTRY["xid_during_run"]]).results
    assert [(r.status, "no NVIDIA driver" in r.reason) for r in results] == [(Status.SKIPPED, True)] * 2
    window = machine.kernel_messages(datetime.now(UTC) - timedelta(days=3650))
    assert window.lines and window.source == "/dev/kmsg"
