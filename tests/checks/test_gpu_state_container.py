""""In a container" is said only where gpuval runs in one, and confidential compute excuses slow host copies:
the first H200 run, a VM, was told its fabric manager "runs on the host"."""

from __future__ import annotations

from gpuval.checks.base import REGISTRY
from gpuval.results.model import Status
from tests.checks.cases_hardware import changes
from tests.health_support import A100, context, data_set, no_imds  # noqa: F401

NO_SYSTEMD = data_set("fabric_manager", {"service": None, "detail": "systemctl is not installed"})


def test_in_a_container_is_said_only_in_one():
    on_a_vm = REGISTRY["fabric"].run(context(A100, NO_SYSTEMD))
    assert on_a_vm.status is Status.SKIPPED and "not judged" in on_a_vm.reason
    assert "container" not in on_a_vm.reason
    pod = changes(NO_SYSTEMD, data_set("container_markers", ["/proc/self/cgroup names kubepods"]))
    in_a_pod = REGISTRY["fabric"].run(context(A100, pod))
    assert in_a_pod.status is Status.SKIPPED and "in a container the fabric manager runs on the host" in \
        in_a_pod.reason


def test_confidential_compute_makes_slow_host_copies_normal():
    """With CC on every host copy is encrypted through a bounce buffer: 5 GB/s is what it does, not a PCIe fault."""
    slow = data_set("measurements.h2d_gbps", 5.0)
    assert REGISTRY["h2d_d2h_bandwidth"].run(context(A100, slow)).status is Status.FAIL
    cc = REGISTRY["h2d_d2h_bandwidth"].run(context(A100, changes(slow, data_set("confidential_compute", True))))
    assert cc.status is Status.SKIPPED and cc.value == 5.0
    assert "confidential compute is on, copies to and from the host are encrypted" in cc.reason
