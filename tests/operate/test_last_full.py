"""The last full result kept on a node and the rule that folds it into a quick check (operate/last_full.py): the
file itself (written, read back, refused), and the rule on every case (pure, a fixed clock)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuval.errors import UsageError
from gpuval.operate.last_full import LastFull, fold, parse_age, path_for, recall, remember, state_dir
from gpuval.results.model import Result, Status, Where

NOW = datetime(2026, 3, 21, 3, 15, tzinfo=timezone.utc)


def _records(*statuses: tuple[str, Status, str], run_id: str = "20260321T031502Z-4be1c0") -> list[Result]:
    return [Result(run_id=run_id, kind="health", name=name, where=Where(hostname="hpc-pg0-7", sku="Standard_X"),
                   status=status, reason=f"{name} said so", data={"fault_code": code}, finished_at=NOW)
            for name, status, code in statuses]


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
