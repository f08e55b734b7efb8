"""The fabric manager service, kernel modules, process limits: this machine's real answers where it has them
(systemctl without systemd, /proc/modules, ulimit, /dev/shm), stand-ins on PATH printing what published output
shows (`systemctl is-active`, `nv-fabricmanager --version`: "Fabric Manager version is : 450.102.04")."""

from __future__ import annotations

import resource
from pathlib import Path

from gpuval.node import services
from tests.node.tools import fake_tool, only_on_path

FM_VERSION = "Fabric Manager version is : 450.102.04"  # as an A100 setup note prints it (see the module docstring)


def test_this_machine_has_systemctl_but_no_systemd():
    """This sandbox: systemctl is installed, systemd is not PID 1; no fabric manager. Nothing is guessed."""
    fm = services.fabric_manager()
    assert fm.service is None and fm.version is None
    assert "systemctl cannot say" in fm.detail and "nv-fabricmanager is not installed" in fm.detail


def test_an_active_fabric_manager_and_its_version(tmp_path: Path, monkeypatch):
    only_on_path(monkeypatch, tmp_path / "bin")
    fake_tool(tmp_path / "bin", "systemctl", 'test "$2" = nvidia-fabricmanager && echo active')
    fake_tool(tmp_path / "bin", "nv-fabricmanager", f"echo '{FM_VERSION}'")
    fm = services.fabric_manager()
    assert (fm.service, fm.version, fm.detail) == ("active", "450.102.04", "")


def test_a_failed_fabric_manager(tmp_path: Path, monkeypatch):
    """gpu-operator#610: the service exits with status=1/FAILURE; is-active then prints `failed`, exit 3."""
    only_on_path(monkeypatch, tmp_path / "bin")
    fake_tool(tmp_path / "bin", "systemctl", "echo failed; exit 3")
    fm = services.fabric_manager()
    assert fm.service == "failed" and fm.version is None and "not installed" in fm.detail


def test_limits_are_this_process_s(tmp_path: Path):
    limits = services.resource_limits()
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert limits.memlock_bytes == (None if soft == resource.RLIM_INFINITY else soft)
    assert limits.shm_bytes and limits.shm_bytes > 0  # this sandbox's /dev/shm
    assert services.resource_limits(tmp_path).shm_bytes is None  # no dev/shm under that root


def test_kernel_modules_here_and_under_a_root(tmp_path: Path):
    assert services.kernel_modules()  # /sys/module always lists built-ins
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/modules").write_text("nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n"
                                           "nvidia 56094720 1 nvidia_peermem, Live 0x0000000000000000 (POE)\n")
    assert services.kernel_modules(tmp_path) == {"nvidia_peermem", "nvidia"}
    assert services.kernel_release() and services.kernel_release(tmp_path)
