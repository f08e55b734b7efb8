"""peermem, shm, memlock, dcgm_diag and fabric through the real Linux reader: a test root with the driver's
/proc file, GPUd's InfiniBand tree and this machine's own /dev/shm (linked in), this process's real locked-memory
limit, stand-ins on PATH for dcgmi, systemctl and nv-fabricmanager, the pynvml stand-in for NVML."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pynvml

from gpuval.checks.base import REGISTRY
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.sysfs import LinuxMachine
from gpuval.results.model import Status
from tests.health_support import no_imds  # noqa: F401
from tests.node.fake_nvml import h100_node, install
from tests.node.sysfs_trees import infiniband_tree
from tests.node.test_dcgm import dcgm3_fail_doc
from tests.node.tools import fake_tool, only_on_path

DRIVER = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"


def node_root(tmp_path: Path, modules: str = "mlx5_ib 1 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n") -> Path:
    root = infiniband_tree(tmp_path / "root")
    for rel, text in (("proc/driver/nvidia/version", DRIVER), ("proc/modules", modules),
                      ("proc/sys/kernel/osrelease", "5.15.0-1075-azure\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "dev/infiniband").mkdir(parents=True)
    (root / "dev/infiniband/uverbs0").write_text("")
    os.symlink("/dev/shm", root / "dev/shm")  # this machine's real /dev/shm
    return root


def run(name: str, ctx):
    [result] = run_suite(ctx, [REGISTRY[name]]).results
    return result


def test_shm_and_memlock_of_this_process(tmp_path: Path):
    ctx = make_context(LinuxMachine(node_root(tmp_path)), "Standard_ND96isr_H100_v5")
    shm = run("shm", ctx)
    assert shm.status is Status.PASS and shm.value == os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize / 2**20
    memlock = run("memlock", ctx)
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    if soft == resource.RLIM_INFINITY:
        assert memlock.status is Status.PASS and memlock.value == "unlimited"
    else:  # this sandbox: 8 MiB, what NCCL's guide warns about in containers
        assert memlock.status is Status.WARN and memlock.value == soft / 2**20 and "ulimit -l" in memlock.reason


def test_peermem_loaded_or_not(tmp_path: Path, monkeypatch):
    install(monkeypatch, h100_node())
    loaded = make_context(LinuxMachine(node_root(tmp_path / "a", "nvidia_peermem 16384 0 - Live 0x0\n")), None)
    assert run("peermem", loaded).status is Status.PASS
    missing = run("peermem", make_context(LinuxMachine(node_root(tmp_path / "b")), None))
    # kernel 5.15 could use DMA-BUF, but whether the GPUs can is CUDA's to say, and libcuda is not here
    assert missing.status is Status.WARN and "nvidia_peermem is not loaded" in missing.reason
    assert "could not be read" in missing.reason


def test_dcgm_diag_through_a_stand_in_dcgmi(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    (tmp_path / "diag.json").write_text(dcgm3_fail_doc())
    fake_tool(tmp_path / "bin", "dcgmi", f'cat {tmp_path}/diag.json; exit 226')
    machine = LinuxMachine(node_root(tmp_path))
    failed = run("dcgm_diag", make_context(machine, None, dcgm_level=3))
    assert failed.status is Status.FAIL and "Diagnostic GPU 5: fail" in failed.reason and failed.details["level"] == 3
    assert run("dcgm_diag", make_context(machine, None)).reason.startswith("not asked")
    only_on_path(monkeypatch, tmp_path / "empty")
    missing = run("dcgm_diag", make_context(machine, None, dcgm_level=1))
    assert missing.status is Status.SKIPPED and "--dcgm 1: dcgmi is not installed" in missing.reason


def test_fabric_from_nvml_and_the_service(tmp_path: Path, monkeypatch):
    """Hopper: NVML's fabric state (completed on 7 GPUs, in progress on one). A100 baseline: the service and its
    version against the driver's, through stand-in systemctl and nv-fabricmanager."""
    completed = (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, 0)
    changes = {i: {"fabric": completed} for i in range(8)}
    changes[6] = {"fabric": (pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, pynvml.NVML_SUCCESS, 0)}
    install(monkeypatch, h100_node(changes))
    only_on_path(monkeypatch, tmp_path / "bin")
    machine = LinuxMachine(node_root(tmp_path))
    hopper = run("fabric", make_context(machine, "Standard_ND96isr_H100_v5"))
    assert hopper.status is Status.WARN and "GPU 6 (0000000B:00:00.0): fabric training in progress" in hopper.reason
    fake_tool(tmp_path / "bin", "systemctl", "echo active")
    fake_tool(tmp_path / "bin", "nv-fabricmanager", "echo 'Fabric Manager version is : 535.161.08'")
    a100 = run("fabric", make_context(machine, "Standard_ND96asr_v4"))
    assert a100.status is Status.FAIL and "fabric manager 535.161.08 is not driver 550.54.15" in a100.reason
