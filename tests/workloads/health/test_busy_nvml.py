"""The measuring guard where fleets run gpuval, on NVML as the stand-in pynvml answers it (no GPU here: the real
module's constants and errors, answers from the lent H200's probe, tests/data/nvml) with real processes in /proc
and a real PID namespace (unshare -p -f --mount-proc, as a container without hostPID has): a container's own PID
namespace, an MPS server and its clients, a display server, a tenant that only copies or pauses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuval.checks.base import REGISTRY
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from gpuval.workloads.health.busy import MeasuringGuard
from tests.health_support import no_imds  # noqa: F401
from tests.node.fake_nvml import FakeGpu, FakeNvml, ForeignProcess, install

ROOT = Path(__file__).resolve().parents[3]
H200_FIGURES = {"hbm_memcpy_gbps": 4205.11, "hbm_triad_gbps": 4383}  # the lent H200's own (h200-vm.yaml)


def h200(**changes) -> FakeGpu:
    """The lent H200 as NVML answers it: its PCI ids (judged by the H200 SXM model), default compute mode."""
    gpu = FakeGpu("00000000:00:06.0", name="NVIDIA H200", device_id=0x233510DE, subsystem_id=0x18BF10DE,
                  compute_mode=0)
    for key, value in changes.items():
        setattr(gpu, key, value)
    return gpu


def hbm(gpu: FakeGpu, monkeypatch) -> object:
    """hbm_bandwidth through the guard on this machine (LinuxMachine) with the stand-in pynvml."""
    install(monkeypatch, FakeNvml([gpu], driver="580.159.04"))
    ctx = make_context(LinuxMachine(env={}), None, (), RecordedMeasurer(H200_FIGURES, "stand-in"), repeats=1)
    return run_suite(ctx, MeasuringGuard().wrap([REGISTRY["hbm_bandwidth"]])).results[0]


# Run in a PID namespace of its own: the guard on the stand-in pynvml, NVML listing the pids given (host pids)
IN_NAMESPACE = """
import json, sys
from tests.node.fake_nvml import FakeGpu, FakeNvml
from tests.workloads.health.test_busy_nvml import H200_FIGURES, h200
fake = FakeNvml([h200(processes=[(int(p), 30 * 2**30) for p in sys.argv[1:]])], driver="580.159.04")
sys.modules["pynvml"] = fake.module()
from gpuval.checks.base import REGISTRY
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.sysfs import LinuxMachine
from gpuval.workloads.health.busy import MeasuringGuard
ctx = make_context(LinuxMachine(env={}), None, (), RecordedMeasurer(H200_FIGURES, "stand-in"), repeats=1)
[r] = run_suite(ctx, MeasuringGuard().wrap([REGISTRY["hbm_bandwidth"]])).results
print(json.dumps(r.to_json()))
"""


def _in_namespace(*pids: int) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9"}
    got = subprocess.run(["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", IN_NAMESPACE,
                          *map(str, pids)], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    if got.returncode != 0 and "Operation not permitted" in got.stderr:
        pytest.skip(f"no PID namespaces here: {got.stderr.strip()}")
    assert got.returncode == 0, got.stderr[-2000:]
    return json.loads(got.stdout.splitlines()[-1])


def test_in_a_pid_namespace_of_its_own_an_idle_tenant_is_busy_and_said_unattributable():
    """Before: a host pid /proc here cannot show counted only while its GPU was loaded, so a tenant pausing (or
    idle between steps) with 30 GiB on the GPU passed and its HBM figure was judged; now every pid NVML lists before
    gpuval opens a context is another job's, named as the host's."""
    r = _in_namespace(28731)
    assert r["status"] == "error" and r["fault_code"] == "GPU_BUSY", r
    assert "GPU 0 used by host pid 28731 (30720 MiB)" in r["reason"]
    assert "processes cannot be attributed here" in r["reason"] and "hostPID: true" in r["reason"]
    assert r["details"]["pid_namespace"] == "own"


def test_in_a_pid_namespace_a_host_pid_equal_to_gpuvals_own_is_not_taken_for_gpuvals():
    """gpuval is pid 1 in its namespace: a tenant whose host pid is 1 (or any pid the container also has) was left
    out as gpuval's own, or named after the wrong process."""
    r = _in_namespace(1)
    assert r["status"] == "error" and "GPU 0 used by host pid 1 (30720 MiB)" in r["reason"], r


def test_in_the_hosts_pid_namespace_an_idle_context_of_another_container_is_busy(monkeypatch):
    """A pid /proc here does not show (another container's), idle: it held a context before gpuval opened one."""
    r = hbm(h200(processes=[(2**22 + 7, 30 * 2**30)]), monkeypatch)
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "pid 4194311 (not visible here: another container?) (30720 MiB)" in r.reason
    assert r.details["pid_namespace"] == "host"


def test_an_mps_server_is_named_with_its_clients_and_is_not_busy_by_itself(monkeypatch, tmp_path):
    """Before: the MPS server alone made every measuring check GPU_BUSY; its clients were never read."""
    server, client = ForeignProcess("nvidia-cuda-mps-server", tmp_path), ForeignProcess("python3", tmp_path)
    try:
        busy = hbm(h200(processes=[(server.pid, 30 * 2**20)], mps_clients=[(client.pid, 2**30)]), monkeypatch)
        alone = hbm(h200(processes=[(server.pid, 30 * 2**20)]), monkeypatch)
    finally:
        server.kill()
        client.kill()
    assert busy.status is Status.ERROR and busy.fault_code == "GPU_BUSY"
    assert (f"GPU 0: MPS server pid {server.pid} nvidia-cuda-mps (30 MiB) with clients pid {client.pid} python3 "
            "(1024 MiB)") in busy.reason
    assert alone.status is Status.PASS and alone.value == 4383
    assert f"GPU 0: an MPS server runs (pid {server.pid} nvidia-cuda-mps (30 MiB)), no client" in alone.reason


def test_a_display_server_under_its_floor_is_a_warn_not_busy(monkeypatch, tmp_path):
    """Xorg on an L4, L40S or A10 node (a few MiB, 0%): before, GPU_BUSY on every run; over its floor, busy."""
    xorg = ForeignProcess("Xorg", tmp_path)
    try:
        light = hbm(h200(graphics=[(xorg.pid, 23 * 2**20)]), monkeypatch)
        heavy = hbm(h200(graphics=[(xorg.pid, 2 * 2**30)]), monkeypatch)
    finally:
        xorg.kill()
    assert light.status is Status.WARN and light.fault_code == "GPU_SHARED" and light.value == 4383
    assert f"GPU 0: graphics process pid {xorg.pid} Xorg (23 MiB), a display server's footprint" in light.reason
    assert heavy.status is Status.ERROR and f"used by graphics process pid {xorg.pid} Xorg (2048 MiB)" in heavy.reason


def test_a_tenant_that_only_copies_is_busy(monkeypatch):
    """SM utilization counts kernel time only: a tenant moving data by DMA read 0% there and passed. Its memory
    utilization and PCIe traffic show it."""
    r = hbm(h200(memory_utilization=[45] * 13, pcie_kb_s=[(11_000_000, 11_000_000)] * 13), monkeypatch)
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "GPU 0 memory 45% busy, PCIe 22.0 GB/s by a process not visible here" in r.reason


def test_a_tenant_pausing_most_of_the_window_is_busy(monkeypatch):
    """The lowest utilization over 1.2 s (0% in a pause) let a tenant busy a quarter of the time through; before a
    check gpuval is idle, so the mean is read."""
    r = hbm(h200(utilization=[100, 100, 100] + [0] * 10), monkeypatch)
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "utilized by a process not visible here" in r.reason


def test_memory_in_use_before_gpuval_opened_a_context_that_no_listed_process_holds_is_busy(monkeypatch):
    """A context NVML lists no process for (the process list refused in some containers): the memory shows it."""
    r = hbm(h200(memory_used=30 * 2**30), monkeypatch)
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "GPU 0: 30720 MiB in use before gpuval opened a context, 30720 MiB more than the processes listed" in r.reason
    assert hbm(h200(memory_used=2**20), monkeypatch).status is Status.PASS  # an idle GPU: 0-1 MiB in use
