""""In a container" is said only where gpuval runs in one (issue 19 item 7): the first H200 run, a VM, was told
its fabric manager "runs on the host" and its missing HCAs were "not visible in this container"."""

from __future__ import annotations

from gpuval.checks.base import REGISTRY
from gpuval.results.model import Status
from tests.checks.cases_issue14 import changes
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
