"""The Kubernetes manifests, pure: options checked as the API server checks them (I2), user values escaped for
the kubelet's $(VAR) expansion (I3, against a copy of the kubelet's expansion rules), gpuval's image when no
--image is given, and the concurrent, ordered pod-log reader with a stand-in for the API call (kmock runs the
client end to end in test_kubernetes.py)."""

from __future__ import annotations

import threading
import time

import pytest

from gpuval.engines.kubernetes import KubernetesEngine, pod_log_lines
from gpuval.engines.spec import Launcher
from tests.conftest import run_gpuval
from tests.engines.specs import nccl_spec


@pytest.mark.parametrize("option", ["namespace=a b$(x)", "namespace=Gpu", "namespace=" + "a" * 64,
                                    "service_account=sa$(touch x)", "topology_configmap=cm/../x",
                                    "rdma_resource=rdma ib", "rdma_resource=ib", "kind=CronJob",
                                    "sshd_config=relative/path", "rdma_count=0", "namespace=a\nb"])
def test_options_are_checked_as_the_api_server_checks_them(option):
    """I2: these rendered manifests the API server refuses (or reached the YAML with a newline)."""
    proc = run_gpuval("submit", "nccl", "--on", "kubernetes", "--opt", option, "--dry-run")
    assert proc.returncode == 2 and "kubernetes option" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _kubelet_expand(value: str, env: dict[str, str]) -> str:
    """What the kubelet does to command, args and env values (kubernetes third_party/forked/golang/expansion):
    `$$` is `$`, `$(NAME)` is NAME's value when defined (else kept), any other `$` is itself."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(" and ")" in value[i + 2:]:
                end = value.index(")", i + 2)
                name = value[i + 2:end]
                out.append(env.get(name, value[i:end + 1]))
                i = end + 1
                continue
        out.append(value[i])
        i += 1
    return "".join(out)


def test_user_values_reach_the_process_as_typed_through_the_kubelet():
    """I3: `--env X='$(HOME)'` reached the process as the pod's HOME; gpuval's own $(JOB_COMPLETION_INDEX) must
    still expand."""
    typed = "$(HOME) $$(X) cost: 5$ ${PATH} $"
    spec = nccl_spec(launcher=Launcher.TORCHRUN, env={"X": typed, "HOME": "/root"}, name="x")
    spec = spec.model_copy(update={"command": [*spec.command, typed]})
    [_, job] = KubernetesEngine({"kind": "Job"}).render(spec).objects
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: _kubelet_expand(e["value"], {"HOME": "/root"}) for e in container["env"]
           if "value" in e}  # the downward API's node name has none
    assert env["X"] == typed
    command = [_kubelet_expand(word, {"JOB_COMPLETION_INDEX": "1"}) for word in container["command"]]
    assert command[-1] == typed and "--node-rank=1" in command


def test_without_an_image_the_pods_run_gpuvals(monkeypatch):
    """The error that asked for --image is gone: gpuval's image, or GPUVAL_IMAGE."""
    from gpuval import __version__

    monkeypatch.delenv("GPUVAL_IMAGE", raising=False)
    rendered = KubernetesEngine().render(nccl_spec(image=None))
    images = {c["image"] for c in _containers(rendered.objects[-1])}
    assert images == {f"ghcr.io/gpuval/gpuval:{__version__}"} and rendered.spec.image in images
    monkeypatch.setenv("GPUVAL_IMAGE", "myacr.azurecr.io/gpuval:dev")
    proc = run_gpuval("submit", "health", "--on", "kubernetes", "--nodes", "2", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "image: myacr.azurecr.io/gpuval:dev" in proc.stdout and "--image" not in proc.stderr


@pytest.mark.parametrize("launcher", [Launcher.MPI, Launcher.TORCHRUN, Launcher.NONE])
def test_every_pod_knows_its_nodes_name_from_the_scheduler(launcher):
    """Every container of every kind, pinned or not, gets GPUVAL_NODE_NAME from the downward API (what
    `gpuval health --drain` and the fleet's workers act on: a pod's host name is the pod's); a value the user
    passes with --env never replaces it."""
    spec = nccl_spec(launcher=launcher, env={"GPUVAL_NODE_NAME": "someone-else"}, name="x")
    for kind in ("auto", "Job"):
        if kind == "Job" and launcher is Launcher.MPI:
            continue  # MPI on a plain Job needs the MPI Operator
        containers = _containers(KubernetesEngine({"kind": kind}).render(spec).objects[-1])
        for container in containers:
            named = [e for e in container["env"] if e["name"] == "GPUVAL_NODE_NAME"]
            assert named == [{"name": "GPUVAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]


def _containers(obj: dict) -> list[dict]:
    replicas = obj["spec"].get("mpiReplicaSpecs") or obj["spec"].get("pytorchReplicaSpecs")
    templates = [r["template"] for r in replicas.values()] if replicas else [obj["spec"]["template"]]
    return [c for t in templates for c in t["spec"]["containers"]]


def test_pod_logs_are_read_16_at_a_time_and_handed_on_in_order():
    """A stand-in for read_namespaced_pod_log with a 20 ms round trip: 200 pods take about 200 / 16 round trips,
    never more than 16 at once, and come back in pod order with their headers."""
    running, most, lock = 0, 0, threading.Lock()

    def read(pod: str) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return f"{pod} line 1\n{pod} line 2"  # the last line without its newline, as a log may end

    pods = [f"p{i:03d}" for i in range(200)]
    started = time.monotonic()
    lines = list(pod_log_lines(read, pods))
    elapsed = time.monotonic() - started
    assert lines == [line for p in pods for line in (f"==> pod {p} <==\n", f"{p} line 1\n", f"{p} line 2\n")]
    assert most == 16 and elapsed < 200 * 0.02 / 4
    assert list(pod_log_lines(read, ["solo"])) == ["solo line 1\n", "solo line 2\n"]  # one pod: no header
