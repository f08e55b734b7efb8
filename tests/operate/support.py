"""Shared by the operate tests: a real health run on a recorded machine, healthy or with a fault; a real
`gpuval exporter` and what it serves."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from gpuval.engines import node_client
from gpuval.node.dist_env import free_port
from gpuval.node.recorded import recorded_data
from gpuval.operate.act import act_on_verdicts, records_charge
from gpuval.operate.brake import parse_cap
from gpuval.operate.evidence import Grounds
from gpuval.operate.node_state import NodeAction
from gpuval.results import read_results
from gpuval.results.model import Result
from tests.conftest import run_gpuval


def recorded_health(tmp_path: Path, ecc_errors: int = 0, name: str = "run",
                    kernel_log: list[str] | None = None) -> list[Result]:
    """The records of a real `gpuval health` run on the recorded ND96asr_v4 (A100) machine; with `ecc_errors`, GPU 3
    has that many uncorrectable ECC errors (a FAIL with fault code ECC_ERRORS); with `kernel_log`, these are its
    kernel log's lines (an Xid that fails: XID_ERROR)."""
    data = recorded_data("Standard_ND96asr_v4")
    if ecc_errors:
        data["gpus"][3]["ecc"] = {"volatile_uncorrected": ecc_errors}
    if kernel_log is not None:
        data["kernel_log"] = kernel_log
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    results = tmp_path / f"{name}.jsonl"
    proc = run_gpuval("health", "--recorded", str(machine), "--results", str(results), "--json")
    assert proc.returncode == (1 if ecc_errors or kernel_log else 0), proc.stderr
    return read_results(results)


def act_on_records(records: list[Result], node: str, state: Path) -> NodeAction:
    """What `health --drain` does on `node` with a run's records (operate.act, the one call; no drain cap): its
    action; a failure's bundle goes to `state`."""
    grounds = Grounds("recorded", [r.name for r in records], records)
    done = act_on_verdicts([records_charge(records, node, grounds)], node_client("slurm"), parse_cap("all", "test"),
                           records[0].run_id, state)
    assert not done.failed, done.failed
    return done.actions[node]


def recorded_machine(tmp_path: Path, name: str, ecc_errors: int = 0, h2d_gbps: float | None = None,
                     kernel_log: bool = True) -> Path:
    """The recorded ND96asr_v4 (A100) as a YAML file with one fault: `ecc_errors` uncorrectable ECC errors on GPU 3
    (ECC_ERRORS, which --quick sees too), slow host copies (H2D_D2H_SLOW below AzNHC's 21 GB/s: only a full run
    measures them), or
    no kernel log (the Xid check cannot run: an ERROR verdict)."""
    data = recorded_data("Standard_ND96asr_v4")
    if ecc_errors:
        data["gpus"][3]["ecc"] = {"volatile_uncorrected": ecc_errors}
    if h2d_gbps is not None:
        data["measurements"]["h2d_gbps"] = h2d_gbps
    if not kernel_log:
        del data["kernel_log"]
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    return machine


def samples(text: str) -> dict[str, list]:
    """The samples of an exposition by metric family name, read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def node_status(text: str, host: str = "n1") -> str:
    """The status whose gpuval_node_status series of `host` is 1 (exactly one)."""
    [status] = [s.labels["status"] for s in samples(text)["gpuval_node_status"]
                if s.labels["host"] == host and s.value == 1.0]
    return status


def counter(text: str, name: str) -> float:
    """The value of one of the exporter's own counters (gpuval_exporter_skipped_records, ...)."""
    return sum(s.value for s in samples(text)[name] if s.name.endswith("_total"))


@contextmanager
def served(results: Path, *options: str) -> Iterator[tuple[int, subprocess.Popen]]:
    """A real `gpuval exporter` on `results` and a free 127.0.0.1 port (no --address: the default bind), listening;
    yields (port, process) and stops it at the end."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuval", "exporter", "--port", str(port), "--results",
                             str(results), *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the exporter never listened"
                time.sleep(0.2)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def scrape(port: int, method: str = "GET", timeout: float = 10, source: str | None = None) -> tuple[int, bytes]:
    """(HTTP status, body) of one request for /metrics; from the loopback address `source` (127.0.0.2: another
    peer than the default 127.0.0.1) when given."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, "/metrics")
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()
