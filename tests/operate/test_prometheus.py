"""Prometheus metrics from Result records: the node_exporter textfile and the exporter, read back with
prometheus_client's own parser (what Prometheus and node_exporter accept), from real `gpuval health` runs on a
recorded A100 machine. The exporter runs as `gpuval exporter` in a subprocess on a free 127.0.0.1 port."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuval.errors import UsageError
from gpuval.node.dist_env import free_port
from gpuval.operate.prometheus import exposition, latest, write_textfile
from gpuval.results import save_results
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.records import record
from tests.operate.support import recorded_health, recorded_machine


def _samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _one(samples: list, **labels: str) -> float:
    [value] = [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return value


def test_textfile_of_a_failing_run_parses_with_every_gauge(tmp_path: Path):
    records = recorded_health(tmp_path, ecc_errors=4)
    path = write_textfile(records, tmp_path / "textfile" / "gpuval.prom")
    assert [p.name for p in path.parent.iterdir()] == ["gpuval.prom"]  # the temporary file was renamed away
    got = _samples(path.read_text())
    host = records[0].where.hostname
    ecc = {"host": host, "check": "ecc", "sku": "Standard_ND96asr_v4", "kind": "health"}
    assert _one(got["gpuval_check_status"], **ecc, status="fail") == 1.0
    assert sum(s.value for s in got["gpuval_check_status"] if s.labels["check"] == "ecc") == 1.0  # a state set
    assert _one(got["gpuval_check_value"], **ecc, metric="ecc", gpu="") == 4.0
    # Per-GPU figures carry the GPU's index: the recording's 8 GPUs, host-to-device copies.
    h2d = [s for s in got["gpuval_check_value"] if s.labels["metric"] == "h2d"]
    assert sorted(int(s.labels["gpu"]) for s in h2d) == list(range(8)) and {s.labels["unit"] for s in h2d} == {"GB/s"}
    assert _one(h2d, gpu="3", bus_id="00000004:00:00.0") > 0  # labelled with the GPU's NVML index and PCI bus id
    assert _one(got["gpuval_node_status"], host=host, kind="health", status="fail") == 1.0
    assert _one(got["gpuval_run_info"], host=host, run_id=records[0].run_id) == 1.0
    ended = max(r.finished_at for r in records).timestamp()
    assert _one(got["gpuval_run_timestamp_seconds"], host=host) == pytest.approx(ended)


def test_textfile_must_end_in_prom(tmp_path: Path):
    with pytest.raises(UsageError, match=r"must end in \.prom"):
        write_textfile([], tmp_path / "gpuval.txt")


H100 = "Standard_ND96isr_H100_v5"


def test_labels_are_inert_and_a_repeated_check_is_one_series():
    now = datetime.now(timezone.utc)
    host = 'n1"} evil 1\n# TYPE x'
    text = exposition([record(Status.PASS, run="r1", at=now, host=host, value=1, sku=H100),
                       record(Status.FAIL, run="r1", at=now, host=host, value=2, sku=H100)])
    got = _samples(text)
    assert {s.labels["host"] for s in got["gpuval_check_status"]} == {host}
    assert _one(got["gpuval_check_status"], status="fail") == 1.0 and _one(got["gpuval_check_value"]) == 2.0


def test_latest_keeps_each_hosts_newest_run_per_kind():
    now = datetime.now(timezone.utc)
    old, new = now - timedelta(hours=1), now
    records = [record(Status.FAIL, run="old-n1", at=old), record(Status.PASS, run="new-n1", at=new),
               record(Status.PASS, run="old-n2", at=old, host="n2"),
               record(Status.PASS, run="sweep-n1", at=old, kind="collective", name="all_reduce")]  # one of five kinds
    assert sorted(r.run_id for r in latest(records)) == ["new-n1", "old-n2", "sweep-n1"]


def _scrape(port: int, proc: subprocess.Popen, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                return answer.read().decode()
        except OSError:
            time.sleep(0.2)
    raise AssertionError("the exporter never answered")


def test_exporter_serves_the_latest_run_and_follows_the_file(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    failing = recorded_health(tmp_path, ecc_errors=1, name="bad")
    save_results(failing, results, db="none")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuval", "exporter", "--port", str(port), "--address",
                             "127.0.0.1", "--results", str(results)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        got = _samples(_scrape(port, proc))
        assert _one(got["gpuval_node_status"], kind="health", status="fail") == 1.0
        assert _one(got["gpuval_run_info"], kind="health", run_id=failing[0].run_id) == 1.0
        # A later run on the same host appends to the file: the next scrape serves it, and only it.
        healthy = recorded_health(tmp_path, name="good")
        save_results(healthy, results, db="none")
        got = _samples(_scrape(port, proc))
        assert [s.labels["run_id"] for s in got["gpuval_run_info"]] == [healthy[0].run_id]
        assert _one(got["gpuval_check_status"], check="ecc", status="pass") == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_exporter_reads_the_store_once(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'fleet.db'}"
    now = datetime.now(timezone.utc)
    save_results([record(Status.PASS, run="r-a", at=now, host="a"), record(Status.FAIL, run="r-b", at=now, host="b")],
                 tmp_path / "r.jsonl", db=store)
    proc = run_gpuval("exporter", "--db", store, "--once")
    assert proc.returncode == 0, proc.stderr
    got = _samples(proc.stdout)
    assert {s.labels["host"]: s.labels["run_id"] for s in got["gpuval_run_info"]} == {"a": "r-a", "b": "r-b"}
    assert _one(got["gpuval_node_status"], host="b", status="fail") == 1.0


def test_exporter_on_a_port_in_use_is_one_line(tmp_path: Path):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = run_gpuval("exporter", "--port", str(port), "--address", "127.0.0.1", "--results",
                          str(tmp_path / "none.jsonl"), timeout=60)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr, proc.stderr


def test_every_grafana_query_selects_series_of_a_real_run(tmp_path: Path):
    """Each selector of docs/grafana-gpuval.json (with its $host/$sku variables at "All") matches series of a real
    health run's metrics: a renamed metric, label or check breaks the dashboard and this test together."""
    import json
    import re

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-gpuval.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 8
    samples = [s for f in text_string_to_metric_families(exposition(recorded_health(tmp_path))) for s in f.samples]
    for expr in exprs:
        selectors = re.findall(r"(gpuval_\w+)\{([^}]*)\}", expr.replace("$host", ".*").replace("$sku", ".*"))
        assert selectors, expr
        for metric, body in selectors:
            matchers = re.findall(r'(\w+)\s*(=~|!=|=)\s*"([^"]*)"', body)
            assert len(matchers) == body.count('"') // 2, body

            def match(sample, matchers=matchers) -> bool:
                for label, op, value in matchers:
                    got = sample.labels.get(label, "")
                    if (op == "=" and got != value) or (op == "!=" and got == value) or (
                            op == "=~" and not re.fullmatch(value, got)):
                        return False
                return True

            assert any(s.name == metric and match(s) for s in samples), f"{metric}{{{body}}} selects nothing"


def test_health_prometheus_writes_the_quick_runs_metrics(tmp_path: Path):
    """`gpuval health --quick --prometheus FILE`, as the DaemonSet runs it: the textfile holds the quick checks
    and the `last_full` record (a full run kept first), parsed by prometheus_client's parser."""
    machine = recorded_machine(tmp_path, "slow", h2d_gbps=10)
    full = run_gpuval("health", "--recorded", str(machine), "--node", "n1")
    assert full.returncode == 1, full.stderr
    target = tmp_path / "textfile" / "gpuval.prom"
    proc = run_gpuval("health", "--quick", "--recorded", str(machine), "--node", "n1", "--prometheus", str(target))
    assert proc.returncode == 1, proc.stderr
    got = _samples(target.read_text())
    checks = {s.labels["check"] for s in got["gpuval_check_status"]}
    assert "last_full" in checks and "ecc" in checks and "h2d_d2h_bandwidth" not in checks
    assert _one(got["gpuval_check_status"], check="last_full", status="fail") == 1.0
    assert _one(got["gpuval_node_status"], kind="health", status="fail") == 1.0


def test_validate_prometheus_holds_the_checks_and_the_sweep(tmp_path: Path):
    """`gpuval validate --prometheus FILE` on this machine (CPU: gloo ranks): the run's health records and its
    all_reduce sweep, and nothing of an earlier run in the same results file."""
    results = tmp_path / "r.jsonl"
    earlier = recorded_health(tmp_path)
    save_results(earlier, results)
    target = tmp_path / "validate.prom"
    proc = run_gpuval("validate", "-e", "64K", "--results", str(results), "--prometheus", str(target),
                      env={"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/x"}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    got = _samples(target.read_text())
    kinds = {s.labels["kind"] for s in got["gpuval_run_info"]}
    run_ids = {s.labels["run_id"] for s in got["gpuval_run_info"]}
    assert kinds == {"health", "collective"} and len(run_ids) == 1 and earlier[0].run_id not in run_ids
    assert any(s.labels["check"] == "all_reduce" for s in got["gpuval_check_status"])


def test_prometheus_name_is_refused_before_the_run(tmp_path: Path):
    for command in (["health", "--quick"], ["validate"]):
        proc = run_gpuval(*command, "--prometheus", str(tmp_path / "metrics.txt"))
        assert proc.returncode == 2 and "must end in .prom" in proc.stderr and proc.stdout == ""
