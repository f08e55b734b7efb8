"""The last full result kept on a node and the rule that folds it into a quick check (workloads/health/last_full.py): the
file itself (written, read back, refused), and the rule on every case (pure, a fixed clock)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.errors import UsageError
from gpuval.workloads.health.last_full import (
    LastFull, baseline_key, fold, parse_age, path_for, recall, remember, state_dir,
)
from gpuval.results.model import Result, Status
from tests.helpers.records import record

NOW = datetime(2026, 3, 21, 3, 15, tzinfo=timezone.utc)


def _records(*statuses: tuple[str, Status, str], run_id: str = "20260321T031502Z-4be1c0") -> list[Result]:
    return [record(status, run=run_id, name=name, host="hpc-pg0-7", sku="Standard_X", reason=f"{name} said so",
                   code=code, at=NOW) for name, status, code in statuses]


def test_a_full_run_is_kept_and_read_back(tmp_path: Path):
    kept = remember(_records(("ecc", Status.FAIL, "ECC_ERRORS"), ("gemm_tflops", Status.FAIL, "GEMM_SLOW"),
                             ("app_clocks", Status.WARN, "APP_CLOCKS_LOW"), ("driver", Status.PASS, "DRIVER_OLD")),
                    "hpc-pg0-7", tmp_path)
    assert kept is not None
    assert (kept.verdict, kept.fault_codes) == (Status.FAIL, ["ECC_ERRORS", "GEMM_SLOW"])
    assert kept.findings == ["ecc: ecc said so", "gemm_tflops: gemm_tflops said so", "app_clocks: app_clocks said so"]
    path = tmp_path / "last-full" / "hpc-pg0-7.json"
    assert path_for("hpc-pg0-7", tmp_path) == path and path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["hpc-pg0-7.json"]  # written beside, renamed: no temp left
    assert recall("hpc-pg0-7", tmp_path) == (kept, "")
    assert json.loads(path.read_text())["run_id"] == "20260321T031502Z-4be1c0"


def test_a_run_that_judged_nothing_keeps_the_earlier_verdict(tmp_path: Path):
    first = remember(_records(("gemm_tflops", Status.FAIL, "GEMM_SLOW")), "n1", tmp_path)
    could_not_run = _records(("gemm_tflops", Status.ERROR, "GEMM_SLOW"), ("ecc", Status.PASS, "ECC_ERRORS"),
                             run_id="later")
    assert remember(could_not_run, "n1", tmp_path) is None
    assert remember(_records(("ecc", Status.SKIPPED, "ECC_ERRORS"), run_id="later"), "n1", tmp_path) is None
    assert recall("n1", tmp_path) == (first, "")
    passed = remember(_records(("gemm_tflops", Status.PASS, "GEMM_SLOW"), run_id="fixed"), "n1", tmp_path)
    assert recall("n1", tmp_path)[0] == passed and passed is not None and passed.verdict is Status.PASS


def test_missing_unreadable_and_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert recall("n1", tmp_path) == (None, "")
    bad = path_for("n2", tmp_path)
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    last, why = recall("n2", tmp_path)
    assert last is None and "not a gpuval last full result" in why and str(bad) in why
    bad.write_text(json.dumps({"node": "n2"}))
    assert "KeyError" in recall("n2", tmp_path)[1]
    with pytest.raises(UsageError, match="one node name"):
        path_for("../../etc/passwd", tmp_path)
    assert "one node name" in recall("a host/name", tmp_path)[1]  # a quick run says it, as could not read
    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    assert state_dir() == tmp_path / "state"


def _last(verdict: Status, age: timedelta, codes: list[str] | None = None) -> LastFull:
    return LastFull(node="n1", run_id="full-1", verdict=verdict, finished_at=NOW - age, fault_codes=codes or [],
                    findings=["gemm_tflops: slowest GPU: bf16 201 TFLOPS"] if codes else [])


def test_the_fold_rule_case_by_case():
    week = timedelta(days=7)
    none = fold(None, "", week, NOW)
    assert (none.status, none.hold, none.codes) == (Status.SKIPPED, "", [])
    assert "no full check" in none.reason

    fresh_fail = fold(_last(Status.FAIL, timedelta(hours=2), ["GEMM_SLOW"]), "", week, NOW)
    assert (fresh_fail.status, fresh_fail.codes, fresh_fail.run_id) == (Status.FAIL, ["GEMM_SLOW"], "full-1")
    assert fresh_fail.reason == ("last full check full-1, 2 h ago: fail (GEMM_SLOW): gemm_tflops: slowest GPU: "
                                 "bf16 201 TFLOPS")

    fresh_pass = fold(_last(Status.PASS, timedelta(days=6)), "", week, NOW)
    assert (fresh_pass.status, fresh_pass.codes, fresh_pass.hold) == (Status.PASS, [], "")

    stale_fail = fold(_last(Status.FAIL, timedelta(days=9), ["GEMM_SLOW"]), "", week, NOW)
    assert stale_fail.status is Status.SKIPPED and stale_fail.codes == []  # reported, not judged
    assert "older than --max-age 7 d: reported, not judged" in stale_fail.reason
    assert "only a full check that passes lifts its drain" in stale_fail.hold  # ... but it still holds the drain

    stale_pass = fold(_last(Status.PASS, timedelta(days=9)), "", week, NOW)
    assert (stale_pass.status, stale_pass.hold) == (Status.SKIPPED, "")

    unreadable = fold(None, "/var/lib/gpuval/last-full/n1.json: Permission denied", week, NOW)
    assert unreadable.status is Status.ERROR and "could not read" in unreadable.reason


def test_max_age_parsing():
    assert parse_age("7d") == timedelta(days=7)
    assert parse_age("12h") == timedelta(hours=12) and parse_age("90") == timedelta(seconds=90)
    assert parse_age("1.5w") == timedelta(days=10.5)
    for bad in ("", "0", "-1d", "7 days", "d"):
        with pytest.raises(UsageError, match="--max-age"):
            parse_age(bad)


# ---- a poisoned or foreign file: refused in one line, quickly, and never a lift -------------------

def _kept_file(tmp_path: Path, node: str = "n1") -> Path:
    remember(_records(("ecc", Status.PASS, "ECC_ERRORS")), node, tmp_path)
    return path_for(node, tmp_path)


def _poison(tmp_path: Path, **fields: object) -> None:
    path = _kept_file(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_deep_nesting_and_a_huge_file_are_refused_not_a_crash(tmp_path: Path):
    path = _kept_file(tmp_path)
    path.write_text("[" * 50_000)
    last, why = recall("n1", tmp_path)
    assert last is None and "nested" in why
    path.write_text(json.dumps({**json.loads(path.read_text().replace("[", "") or "{}"), "pad": "x" * 2_000_000}))
    last, why = recall("n1", tmp_path)
    assert last is None and "bytes" in why


def test_a_fifo_or_a_symlink_is_no_kept_result(tmp_path: Path):
    import os

    path = _kept_file(tmp_path)
    path.unlink()
    os.mkfifo(path)  # reading it would wait for a writer for ever
    last, why = recall("n1", tmp_path)
    assert last is None and "not a regular file" in why
    path.unlink()
    path.symlink_to("/dev/zero")  # reading it would fill the memory
    last, why = recall("n1", tmp_path)
    assert last is None and why
    assert fold(last, why).status is Status.ERROR  # could not read: nothing lifted


def test_markup_and_60k_codes_are_cut_fast(tmp_path: Path):
    import time

    _poison(tmp_path, verdict="fail", fault_codes=["[/]", "[bold red]X"] + [f"C{i}" for i in range(60_000)],
            findings=["[/]" * 1000] * 20)
    started = time.monotonic()
    last, why = recall("n1", tmp_path)
    assert why == "" and last is not None and time.monotonic() - started < 2
    assert last.fault_codes[:2] == ["BOLDREDX", "C0"] and len(last.fault_codes) <= 64
    assert len(last.findings) <= 10 and all(len(f) <= 500 for f in last.findings)


def test_another_nodes_file_and_a_verdict_that_judged_nothing_are_refused(tmp_path: Path):
    _poison(tmp_path, node="n2")
    last, why = recall("n1", tmp_path)
    assert last is None and "node n2" in why
    for verdict in ("skipped", "error"):
        _poison(tmp_path, node="n1", verdict=verdict)
        last, why = recall("n1", tmp_path)
        assert last is None and "judged nothing" in why and fold(last, why).status is Status.ERROR


def test_a_symlinked_last_full_folder_is_not_followed_when_writing(tmp_path: Path):
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "last-full").symlink_to(elsewhere)
    with pytest.raises(OSError):
        remember(_records(("ecc", Status.PASS, "ECC_ERRORS")), "n1", tmp_path / "state")
    assert list(elsewhere.iterdir()) == []


def test_a_judgement_against_another_baseline_is_not_folded(tmp_path: Path):
    """A full run judged with SKU Standard_X (and its GPU model), a quick run without the SKU: the
    kept FAIL is reported, not judged (it would fail a healthy node by another SKU's figures), and holds."""
    kept = remember(_records(("gemm_tflops", Status.FAIL, "GEMM_SLOW")), "n1", tmp_path)
    assert kept is not None and kept.baseline == baseline_key("Standard_X", None)
    same = fold(kept, "", timedelta(days=7), NOW, baseline=baseline_key("Standard_X", None))
    assert same.status is Status.FAIL
    other = fold(kept, "", timedelta(days=7), NOW, baseline=baseline_key(None, "NVIDIA H200"))
    assert other.status is Status.SKIPPED and other.codes == [] and "judged against" in other.reason
    assert "only a full check that passes lifts its drain" in other.hold


def test_quick_never_folds_a_full_fail_judged_against_another_sku(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The full check judged the A100 recording against the H100 SKU (every figure fails); the quick
    check of the same machine against its own SKU passes: the kept FAIL is reported, not judged."""
    from tests.conftest import run_gpuval
    from tests.operate.support import recorded_machine

    monkeypatch.setenv("GPUVAL_STATE_DIR", str(tmp_path / "state"))
    machine = recorded_machine(tmp_path, "a100")
    full = run_gpuval("health", "--recorded", str(machine), "--node", "n1", "--sku", "Standard_ND96isr_H100_v5")
    assert full.returncode == 1 and recall("n1")[0].verdict is Status.FAIL, full.stdout
    quick = run_gpuval("health", "--quick", "--recorded", str(machine), "--node", "n1", "--json")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    [kept] = [r for r in json.loads(quick.stdout) if r["name"] == "last_full"]
    assert kept["status"] == "skipped" and "judged against another baseline" in kept["reason"]


def test_codes_no_health_check_has_are_never_read_as_rechecked(tmp_path: Path):
    """A kept file is writable by job accounts: a FLEET_* code (no health check re-checks one) added to its
    `rechecked` is dropped when it is read, so no quick pass lifts the fleet's drain through it."""
    remember(_records(("ecc", Status.PASS, "ECC_ERRORS")), "n1", tmp_path)
    path = path_for("n1", tmp_path)
    data = json.loads(path.read_text())
    data["rechecked"] += ["FLEET_NODE_SLOW", "FLEET_SLOW", "MADE_UP"]
    path.write_text(json.dumps(data))
    last, why = recall("n1", tmp_path)
    assert why == "" and last is not None and last.rechecked == ["ECC_ERRORS"]
