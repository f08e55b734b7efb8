"""The NVML reads beyond the inventory basics and what else runs on a GPU, against the
stand-in pynvml answering as a lent H200 answered (tests/data/nvml/h200-probe-2026-11-26.json); the container
markers of that machine (a VM with a stale /.dockerenv); CUDA's start-up through a stand-in libcuda."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gpuval.node import cuda_attrs
from gpuval.node.nvml import read_inventory
from gpuval.node.nvml_activity import gpu_activity, own_pids, pid_namespace_is_hosts
from gpuval.node.nvml_state import FIELD_IDS, PROBE_FIELD_IDS, field_id
from gpuval.node.sysfs import LinuxMachine
from tests.conftest import DATA
from tests.node.fake_nvml import FakeGpu, FakeNvml, ForeignProcess, install

PROBE = json.loads((DATA / "nvml" / "h200-probe-2026-11-26.json").read_text())


def h200(**changes) -> FakeGpu:
    """The lent H200 as NVML answered after 10 s of GEMMs (fields as read: id, return, type, uint64, uint)."""
    fields = {fid: ull for fid, _ret, _type, ull, _ui in PROBE["f2"]}
    gpu = FakeGpu("00000000:00:06.0", name="NVIDIA H200", fields=fields,
                  thresholds={pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: PROBE["thr1"],
                              pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: PROBE["thr2"]},
                  histogram=tuple(PROBE["hist"]), unrepairable=PROBE["unrep"], vbios=PROBE["vbios"],
                  compute_mode=PROBE["cm"], virtualization=PROBE["virt"])
    for key, value in changes.items():
        setattr(gpu, key, value)
    return gpu


def test_the_h200s_state_is_read_as_nvidia_smi_shows_it(monkeypatch):
    install(monkeypatch, FakeNvml([h200()], driver="580.159.04"))
    inv = read_inventory()
    [g] = inv.gpus
    # nvidia-smi -q printed "SW Power Capping: 5080234 us" for the field's 5080234848: the counters count ns
    assert g.clock_event_counters.sw_power_cap_s == pytest.approx(5.080234848)
    assert g.clock_event_counters.hw_thermal_s == 0.0 and g.clock_event_counters.hw_power_brake_s == 0.0
    assert (g.temperature.memory_c, g.temperature.gpu_slowdown_c, g.temperature.memory_max_c) == (36, 89, 95)
    assert g.remap_histogram.max == 3072 and g.remap_histogram.none == 0 and g.unrepairable_memory is False
    assert g.inforom_valid is True and g.vbios == "96.00.A5.00.1A"
    assert (g.compute_mode, g.virtualization) == ("default", "pass_through")
    assert inv.confidential_compute is False


@pytest.mark.parametrize("name, number", sorted({**FIELD_IDS, **PROBE_FIELD_IDS}.items()))
def test_every_field_id_fallback_is_the_installed_nvidia_ml_pys_constant(name, number):
    """A renumbering in nvml.h (or a fallback typed wrong: 251-253 are power smoothing, 269-271 the clock event
    counters) fails here, against the nvidia-ml-py installed."""
    assert getattr(pynvml, name) == number


def test_a_field_an_older_nvidia_ml_py_does_not_name_is_read_by_its_number():
    older = type("OlderPynvml", (), {})()
    assert field_id(older, "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN") == 270
    assert field_id(pynvml, "NVML_FI_PWR_SMOOTHING_ENABLED") == 251


def test_a_corrupted_inforom_and_an_old_gpu_that_reports_none_of_it(monkeypatch):
    old = FakeGpu("00000000:00:07.0", name="Tesla V100-SXM2-32GB")
    install(monkeypatch, FakeNvml([h200(inforom_error=pynvml.NVML_ERROR_CORRUPTED_INFOROM,
                                        compute_mode=pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), old]))
    bad, v100 = read_inventory().gpus
    assert bad.inforom_valid is False and bad.inforom_error == "Corrupted infoROM"  # NVML's words
    assert bad.compute_mode == "exclusive_process"
    assert v100.remap_histogram is None and v100.clock_event_counters is None and v100.vbios is None
    assert v100.compute_mode is None and v100.temperature.memory_c is None and v100.unrepairable_memory is None


def test_other_processes_are_named_and_gpuvals_own_are_not(monkeypatch):
    """pid 1 stands for another job's process (its name read from /proc), a pid /proc does not have for another
    container's; this process and its child are gpuval's own and never count."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in own_pids() and os.getpid() in own_pids()
        gpu = h200(processes=[(os.getpid(), 2**30), (child.pid, 2**30), (1, 1002 * 2**20), (2**22 + 7, 2**20)],
                   utilization=[100] * 13)
        install(monkeypatch, FakeNvml([gpu]))
        seen = gpu_activity([0], seconds=0.2)
    finally:
        child.kill()
        child.wait()
    assert [(p.gpu, p.pid, p.used_memory_mib) for p in seen.processes] == [(0, 1, 1002), (0, 2**22 + 7, 1)]
    assert seen.processes[0].name == Path("/proc/1/comm").read_text().strip() and seen.processes[1].name == ""
    assert seen.loads[0].gpu_pct_mean == 100 and seen.attributable


def test_the_load_is_read_mean_and_lowest_with_memory_utilization_and_pcie_traffic(monkeypatch):
    """Just after gpuval's own load ended the lent H200 read 2, 2, then 0%: its own tail is not another load (the
    lowest); a tenant pausing (three samples of thirteen busy) shows in the mean; a copy-only tenant in memory
    utilization and PCIe traffic (KB/s, both directions)."""
    install(monkeypatch, FakeNvml([h200(utilization=list(PROBE["after"][1])),
                                   h200(utilization=[100, 100, 100] + [0] * 10, memory_utilization=[45] * 13,
                                        pcie_kb_s=[(11_000_000, 11_000_000)] * 13, memory_used=30 * 2**30)]))
    tail, tenant = gpu_activity([0, 1], seconds=1.2).loads.values()
    assert tail.gpu_pct_min == 0 and tail.gpu_pct_mean < 1 and tail.memory_used_mib == 0
    assert tenant.gpu_pct_min == 0 and tenant.gpu_pct_mean > 20
    assert tenant.memory_pct_mean == 45 and tenant.pcie_mb_s_mean == 22_000 and tenant.memory_used_mib == 30 * 1024


def test_mps_server_clients_and_graphics_processes_are_told_apart(monkeypatch, tmp_path):
    """NVML lists the MPS server as a compute process and its clients through nvmlDeviceGetMPSComputeRunningProcesses;
    Xorg through the graphics list."""
    server, client, xorg = (ForeignProcess(c, tmp_path) for c in ("nvidia-cuda-mps-server", "python3", "Xorg"))
    try:
        install(monkeypatch, FakeNvml([h200(processes=[(server.pid, 30 * 2**20)],
                                            mps_clients=[(client.pid, 2**30)], graphics=[(xorg.pid, 4 * 2**20)])]))
        seen = gpu_activity([0], seconds=0.1)
    finally:
        for proc in (server, client, xorg):
            proc.kill()
    assert [(p.pid, p.name, p.kind) for p in seen.processes] == [
        (client.pid, "python3", "mps_client"), (server.pid, "nvidia-cuda-mps", "mps_server"),
        (xorg.pid, "Xorg", "graphics")]


def test_a_pid_namespace_of_its_own_is_told_and_no_pid_is_named_or_taken_for_gpuvals(tmp_path):
    """A real PID namespace (unshare -p -f --mount-proc, as a container without hostPID has): NVML's pids are the
    host's there, so none is named from /proc or left out as gpuval's own."""
    assert pid_namespace_is_hosts() is True  # this test's own namespace is the host's
    code = ("from gpuval.node.nvml_activity import pid_namespace_is_hosts, own_pids; import os; "
            "print(pid_namespace_is_hosts(), os.getpid(), sorted(own_pids()))")
    got = subprocess.run(["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60)
    if got.returncode != 0 and "Operation not permitted" in got.stderr:
        pytest.skip(f"no PID namespaces here: {got.stderr.strip()}")
    assert got.stdout.split()[:2] == ["False", "1"], got.stderr  # pid 1 in its namespace: NVML's pid for it is not
    (tmp_path / "self" / "ns").mkdir(parents=True)
    (tmp_path / "self" / "ns" / "pid").symlink_to("pid:[4026532338]")  # what readlink gave in that namespace
    assert pid_namespace_is_hosts(tmp_path) is False
    assert pid_namespace_is_hosts(tmp_path / "absent") is None


MOUNT_VM = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534"
MOUNT_DOCKER = ("1071 907 0:165 / / rw,relatime master:385 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/"
                "X:/var/lib/docker/overlay2/l/Y,upperdir=/var/lib/docker/overlay2/a/diff,workdir=/var/lib/docker/"
                "overlay2/a/work")


@pytest.mark.parametrize("mountinfo, expected", [
    (MOUNT_VM, []),  # the lent H200: a VM image built from a container image keeps /.dockerenv
    (MOUNT_DOCKER, ["/.dockerenv (root file system overlay)"]),
])
def test_dockerenv_says_container_only_on_a_containers_root(tmp_path: Path, mountinfo: str, expected: list[str]):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / ".dockerenv").write_text("")
    (tmp_path / "proc/self/mountinfo").write_text(mountinfo + "\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/process_api/05812e96a88eea36c80b18161fbed48f\n")
    assert LinuxMachine(tmp_path, env={}).container_markers() == expected


class _Cuda:
    """libcuda's three calls start_cuda makes, answering `code` from cuInit (0: success, then `count` devices)."""

    def __init__(self, code: int, count: int = 0) -> None:
        self.code, self.count = code, count

    def cuInit(self, _flags):  # noqa: N802
        return self.code

    def cuDeviceGetCount(self, ref):  # noqa: N802
        ref._obj.value = self.count
        return 0

    def cuGetErrorString(self, code, ref):  # noqa: N802
        ref._obj.value = {802: b"system not yet initialized", 100: b"no CUDA-capable device is detected"}[code]
        return 0


@pytest.mark.parametrize("code, count, env, expected", [
    (0, 1, {}, {"devices": 1, "error_code": None}),
    (802, 0, {}, {"devices": None, "error_code": 802, "error": "system not yet initialized (CUDA error 802)"}),
    (100, 0, {"CUDA_VISIBLE_DEVICES": "none", "PATH": "/bin"}, {"error_code": 100, "env": {"CUDA_VISIBLE_DEVICES":
                                                                                           "none"}}),
])
def test_cuda_start_says_cudas_error_and_the_variables_that_choose_its_devices(monkeypatch, code, count, env,
                                                                              expected):
    monkeypatch.setattr(cuda_attrs, "_driver", lambda: _Cuda(code, count))
    start = cuda_attrs.start_cuda(env)
    assert {k: getattr(start, k) for k in expected} == expected
    assert cuda_attrs.is_system_not_ready(str(start.error)) is (code == 802)


def test_the_gpu_checks_nvml_probe_reads_every_field_by_name_and_records_what_fails(monkeypatch, capsys):
    """scripts/gpu-check-nvml-probe.py on the stand-in answering as the lent H200 did: the clock event counters and
    power smoothing ids by name, the thresholds, memory used beside reserved; a read NVML refuses is recorded."""
    import runpy

    install(monkeypatch, FakeNvml([h200(memory_used=2**20)], driver="580.159.04"))
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "gpu-check-nvml-probe.py"),
                   run_name="__main__")
    doc = json.loads(capsys.readouterr().out)
    [g] = doc["gpus"]
    assert doc["driver"] == "580.159.04" and doc["host_pid_namespace"] is True
    assert g["pci_device_id"] == "0x233010DE" and g["thresholds_c"]["SLOWDOWN"] == 89
    fields = g["fields"]
    assert fields["NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"] == {"id": 74, "return": 0, "type": 3,
                                                                       "value": 5080234848}
    assert fields["NVML_FI_PWR_SMOOTHING_ENABLED"]["id"] == 251 and fields["NVML_FI_PWR_SMOOTHING_ENABLED"][
        "return"] == pynvml.NVML_ERROR_NOT_SUPPORTED  # not in the probe's answers: recorded, not fatal
    assert g["memory_mib"] == {"used": 1, "reserved": 454} and "error" in g["pcie_gen_max_gpu"]
