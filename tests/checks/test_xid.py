"""The xid check's window (--since; the last pass on this machine, else boot), its pass mark, SXids known to be
harmless, Xid 154 back to "None", undated lines, xid_during_run over a whole suite, and the catalog's verdicts on
kernel-log streams (a burst of 300 Xid 95 lines read from a node's /dev/kmsg, a cancelling pair, a site's own
limits), on the recorded nodes with published kernel logs (tests/data/kernel-log/SOURCE.md) and on this machine's
own kernel log."""

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
    # 43 (IGNORE), 31 and 94 (RESTART_APP): the GPUs may take work again, the applications must restart
    assert since_boot.status is Status.WARN and "since boot (2024-07-28 09:15:00 UTC)" in since_boot.reason
    assert {x["xid"]: x["action"] for x in since_boot.details["xids"]} == {43: "none", 31: "restart-app",
                                                                            94: "restart-app"}
    assert since_boot.details["action"] == "restart-app"
    after_94 = run("xid", context(A100, dated, since=datetime(2024, 8, 10, tzinfo=UTC)))
    assert after_94.status is Status.PASS and "since 2024-08-10 00:00:00 UTC (--since)" in after_94.reason
    only_31 = run("xid", context(A100, dated, since=datetime(2024, 8, 1, tzinfo=UTC)))
    assert only_31.status is Status.WARN and {x["xid"] for x in only_31.details["xids"]} == {31, 94}
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
    # a run that warns or fails never moves the mark: the Xid stays until a reboot or --since
    mark.write(datetime(2024, 7, 30, tzinfo=UTC))
    warned = run("xid", context(A100, dated, xid_mark=mark))
    assert warned.status is Status.WARN and mark.read() == datetime(2024, 7, 30, tzinfo=UTC)
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
    """R590's Xid 45 lines name the Xid that caused them (149, 145): not solo, the catalog asks nothing."""
    lines = (DATA / "kernel-log" / "journal-xid45.txt").read_text().splitlines()
    result = run("xid", context(H100, lambda d: d.update(kernel_log=lines, boot_time="2026-05-18T00:00:00+00:00")))
    assert result.status is Status.PASS and "7 line(s) carry no time and were all counted" in result.reason
    assert result.value == 7 and "action" not in result.details


def test_xid_during_run_spans_the_whole_suite():
    """The watch starts before the first check and is read by the last one: events of the run, once."""
    ctx = context(H100, data_set("xid_events_during_run", [{"xid": 48, "gpu": 1, "pci_bus_id": "00000002:00:00.0"}]))
    results = run_suite(ctx, all_checks()).results
    assert results[-1].name == "xid_during_run" and results[-1].status is Status.FAIL
    assert results[-1].reason.startswith("Xid 48 (Double Bit ECC Error) on PCI 0002:00:00.0 (GPU 1), 1 line: reset "
                                         "the GPU [catalog: WORKFLOW_XID_48]")
    assert results[-1].details["action"] == "reset-gpu"
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


def _node(root: Path, kmsg: str) -> LinuxMachine:
    """A node's files as the xid check reads them: a driver loaded, its boot time, /dev/kmsg (a saved copy)."""
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06\n")
    (root / "proc/stat").write_text("cpu  1 2 3\nbtime 1777593600\n")  # 2026-05-01 00:00 UTC
    (root / "dev").mkdir()
    (root / "dev/kmsg").write_bytes((DATA / "kernel-log" / kmsg).read_bytes())
    return LinuxMachine(root)


def test_a_burst_of_300_lines_is_one_finding_on_the_record(tmp_path: Path):
    """300 Xid 95 lines in three bursts on one GPU (and the Xid 154 the driver adds), an Xid 94 on another, read
    from the node's /dev/kmsg: one finding per GPU and Xid, the catalog's action on the record."""
    [result] = run_suite(make_context(_node(tmp_path, "kmsg-xid95-burst.txt"), None), [REGISTRY["xid"]]).results
    assert result.status is Status.FAIL and result.value == 302 and result.details["action"] == "reset-gpu"
    found = {(x["pci"], x["xid"]): (x["count"], x["bursts"], x["action"]) for x in result.details["xids"]}
    assert found == {("0000:01:00", 95): (300, 3, "reset-gpu"), ("0000:01:00", 154): (1, 1, "reset-gpu"),
                     ("0000:41:00", 94): (1, 1, "restart-app")}
    assert ("Xid 95 (Uncontained memory error) on PCI 0000:01:00, 300 lines in 3 bursts: reset the GPU "
            "[catalog: RESET_GPU]") in result.reason
    assert "0000:41:00" not in result.reason  # the warning is outranked, kept on the record
    assert (result.details["xids"][0]["first"], result.details["xids"][0]["last"]) == (
        "2026-05-01T01:00:00+00:00", "2026-05-01T01:20:00.099000+00:00")


def test_a_cancelled_163_and_a_cleared_95_leave_one_warning():
    lines = (DATA / "kernel-log" / "kmsg-xid163-162-154none.txt").read_text().splitlines()
    result = run("xid", context(H100, data_set("kernel_log", lines)))
    assert result.status is Status.WARN and result.details["action"] == "investigate"
    assert result.reason.startswith("Xid 163 (Power Smoothing HW Circuitry capability disengaged) on PCI 0009:01:00")
    whys = {(x["pci"], x["xid"]): x["why"] for x in result.details["xids"]}
    assert whys[("0008:01:00", 163)] == "cancelled by the later Xid 162"
    assert whys[("0018:01:00", 95)] == "the later Xid 154 on this GPU: None"


def test_a_sites_baseline_sets_the_policy_and_a_non_finite_one_is_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    strict = tmp_path / "strict.yaml"
    strict.write_text("sku: Standard_ND96asr_v4\nxid:\n  fatal: [94]\n")
    failed = run("xid", context(A100, dated, baselines=[strict]))
    assert failed.status is Status.FAIL and failed.details["action"] == "reset-gpu"
    assert "Xid 94 (Contained memory error) on PCI 0000:00:08, 1 line: reset the GPU [the baseline's xid.fatal list]" \
        in failed.reason
    for key, value in (("burst_s", ".inf"), ("burst_s", ".nan"), ("recur", "0"), ("recur", "true")):
        bad = tmp_path / f"bad-{key}-{value}.yaml"
        bad.write_text(f"sku: Standard_ND96asr_v4\nxid:\n  {key}: {value}\n")
        refused = run("xid", context(A100, dated, baselines=[bad]))
        assert refused.status is Status.ERROR and f"could not run: baseline xid.{key}" in refused.reason
