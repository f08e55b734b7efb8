"""Drains owned by fault code: a drain or taint records the codes it stands for, and a pass lifts only
a drain whose every code it re-checked: a quick pass never lifts the fleet's drain (FLEET_*), nor a measured
code only a full check sees; the resume re-reads the kept result under the node's lock, so a quick check whose
scontrol answers slowly never lifts what a failing full check drained meanwhile. Pure rules first, then the real
command line against real Slurm (tests/operate/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuval.operate.node_state import drain_codes, lift_hold, merged_codes, rechecked_codes
from gpuval.engines.slurm.nodes import read_node
from gpuval.results.model import Status
from tests.conftest import run_gpuval
from tests.helpers.records import record
from tests.operate.support import recorded_machine


def test_the_codes_rules():
    assert drain_codes("gpuval: FLEET_SLOW ECC_ERRORS 20261126T000000Z-abc123") == ["FLEET_SLOW", "ECC_ERRORS"]
    assert drain_codes("gpuval: A B C D E F +3 run") is None  # lists fewer than it stands for: a person lifts it
    assert drain_codes("admin: replace fan 3") is None
    assert rechecked_codes([record(Status.PASS, code="ECC_ERRORS"), record(Status.WARN, code="APP_CLOCKS_LOW"),
                            record(Status.FAIL, code="XID_ERROR"), record(Status.SKIPPED, code="GEMM_SLOW"),
                            record(Status.ERROR, code="NCCL_NODE_SLOW")]) == ["APP_CLOCKS_LOW", "ECC_ERRORS"]
    assert lift_hold(["ECC_ERRORS"], ["ECC_ERRORS", "XID_ERROR"]) == ""
    assert "FLEET_SLOW" in lift_hold(["FLEET_SLOW"], ["ECC_ERRORS"])
    assert "more fault codes than it lists" in lift_hold(None, ["ECC_ERRORS"])
    assert lift_hold(["FLEET_SLOW"], None) == ""  # a caller that names no codes: the old rule
    assert merged_codes(["FLEET_SLOW"], ["ECC_ERRORS", "FLEET_SLOW"]) == ["FLEET_SLOW", "ECC_ERRORS"]


def _health(machine: Path, node: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = run_gpuval("health", "--recorded", str(machine), "--node", node, "--scheduler", "slurm", "--drain",
                      *args, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_a_health_pass_never_lifts_the_fleets_drain(cluster, tmp_path: Path):
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=gpuval: FLEET_SLOW 20261126T000000Z-f1ee70")
    good = recorded_machine(tmp_path, "good")
    for args in (["--quick"], []):  # the HealthCheckProgram's quick check, then a full check
        proc = _health(good, "n1", *args)
        assert proc.returncode == 0 and "slurm node n1: unchanged" in proc.stdout, proc.stdout
        assert "did not re-check FLEET_SLOW" in proc.stdout
        assert read_node("n1").reason == "gpuval: FLEET_SLOW 20261126T000000Z-f1ee70"


def test_a_failure_on_a_drained_node_adds_its_codes_and_a_quick_pass_lifts_only_what_it_rechecked(cluster, tmp_path):
    cluster.scontrol("update", "nodename=n2", "state=drain", "reason=gpuval: FLEET_BROKEN 20261126T000000Z-f1ee70")
    proc = _health(recorded_machine(tmp_path, "ecc", ecc_errors=2), "n2", "--quick")
    assert proc.returncode == 1
    assert read_node("n2").reason.startswith("gpuval: FLEET_BROKEN ECC_ERRORS ")  # both codes now
    proc = _health(recorded_machine(tmp_path, "good"), "n2", "--quick")
    assert "did not re-check FLEET_BROKEN" in proc.stdout and read_node("n2").drained


def test_a_slow_scontrol_never_lets_a_quick_pass_lift_a_full_checks_new_drain(cluster, tmp_path: Path):
    """The quick check is acting (its scontrol reads slowly: 6 s) when a full check finds a slow GEMM: the full
    check's drain waits for the quick check's action and lands after it; n1 ends drained with H2D_D2H_SLOW."""
    cluster.scontrol("update", "nodename=n1", "state=drain", "reason=gpuval: ECC_ERRORS 20261126T000000Z-0ecc00")
    real = subprocess.run(["which", "scontrol"], capture_output=True, text=True, check=True).stdout.strip()
    wrappers, marker = tmp_path / "bin", tmp_path / "reading"
    wrappers.mkdir()
    (wrappers / "scontrol").write_text(
        "#!/bin/sh\n"
        f'if [ -n "$GPUVAL_TEST_SLOW" ] && [ "$1" = show ]; then touch {marker}; sleep 6; fi\n'
        f'exec {real} "$@"\n')
    (wrappers / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{wrappers}:{os.environ['PATH']}"}
    quick = subprocess.Popen([sys.executable, "-m", "gpuval", "health", "--quick", "--recorded",
                              str(recorded_machine(tmp_path, "good")), "--node", "n1", "--scheduler", "slurm",
                              "--drain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**env, "GPUVAL_TEST_SLOW": "1"})
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert quick.poll() is None and time.monotonic() < deadline, quick.communicate()
        time.sleep(0.1)
    full = _health(recorded_machine(tmp_path, "slow", h2d_gbps=10), "n1", env={"PATH": env["PATH"]})
    out, err = quick.communicate(timeout=120)
    assert full.returncode == 1 and "slurm node n1: drained" in full.stdout, full.stdout + full.stderr
    assert read_node("n1").drained and "H2D_D2H_SLOW" in read_node("n1").reason, (out, err, read_node("n1"))


@pytest.mark.asyncio
async def test_a_kubernetes_taint_is_lifted_only_by_a_pass_that_rechecked_its_codes(kmock):
    """Against kmock (an in-memory Kubernetes API, as tests/operate/test_kube_node.py): the fleet's taint with its
    FLEET_SLOW annotation survives a health pass; a health failure adds its code; a pass that re-checked both
    (the fleet's and the health check's) lifts it."""
    from kubernetes import client

    from gpuval.engines.nodes import FAULTS_ANNOTATION, MARK_ANNOTATION, TAINT_KEY
    from gpuval.engines.kubernetes import KubernetesEngine
    from gpuval.operate.node_state import apply

    kmock.resources["v1/nodes"] = {"kind": "Node", "namespaced": False}
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    taint = {"key": TAINT_KEY, "effect": "NoSchedule"}
    await asyncio.to_thread(client.CoreV1Api(api).create_node, {
        "apiVersion": "v1", "kind": "Node", "spec": {"taints": [taint]},
        "metadata": {"name": "g1", "resourceVersion": "7", "annotations": {FAULTS_ANNOTATION: "FLEET_SLOW"}}})

    def node() -> dict:
        return kmock.objects["v1/nodes", None, "g1"].raw

    async def act(verdict: Status, codes: list[str], rechecked: list[str]) -> str:
        done = await asyncio.to_thread(apply, verdict, "g1", "20261126T000000Z-0000a1", codes,
                                       KubernetesEngine(api_client=api).node_client(), rechecked=rechecked)
        return done.action.value

    assert await act(Status.PASS, [], ["ECC_ERRORS"]) == "unchanged"
    assert node()["spec"]["taints"] == [taint] and node()["metadata"]["annotations"][FAULTS_ANNOTATION] == "FLEET_SLOW"
    assert await act(Status.FAIL, ["ECC_ERRORS"], []) == "tainted"  # tainted already: its codes added, its mark now
    mark = node()["metadata"]["annotations"][MARK_ANNOTATION]
    assert mark.endswith(" 20261126T000000Z-0000a1")  # the run that wrote the taint's codes last: its to give back
    assert await act(Status.PASS, [], ["ECC_ERRORS"]) == "unchanged"  # a pass that keeps the taint keeps its mark
    assert node()["metadata"]["annotations"][MARK_ANNOTATION] == mark
    assert node()["metadata"]["annotations"][FAULTS_ANNOTATION] == "FLEET_SLOW ECC_ERRORS"
    assert await act(Status.PASS, [], ["ECC_ERRORS"]) == "unchanged"
    assert await act(Status.PASS, [], ["ECC_ERRORS", "FLEET_SLOW"]) == "untainted"
    assert node()["spec"]["taints"] == [] and MARK_ANNOTATION not in node()["metadata"]["annotations"]
