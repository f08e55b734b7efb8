"""The pods of any job, found by the labels its controller puts on them, and the output of a command run in one.

`jobs diagnose` reaches any job of a namespace, not only gpuval's, so a job's pods are the union of what these
label selectors find (each selector a list call; labels are ANDed within one, there is no OR across keys):

- gpuval's own `gpuval.io/job=NAME` (its pod templates carry it, whatever the kind);
- an MPIJob's (kubeflow/mpi-operator v0.3+, the v2beta1 API: pkg/controller/mpi_job_controller.go `defaultLabels`):
  `training.kubeflow.org/job-name=NAME` with `training.kubeflow.org/operator-name=mpi-operator`, on the launcher and
  the workers alike;
- a PyTorchJob's (kubeflow/training-operator v1.4+: pkg/controller.v1/common/job_controller.go `GenLabels`):
  `training.kubeflow.org/job-name=NAME` with `training.kubeflow.org/operator-name=pytorchjob-controller` (the
  operator name keeps a TFJob of the same name out);
- a batch Job's (kubernetes pkg/registry/batch/job/strategy.go `generateSelector`): `batch.kubernetes.io/job-name`
  (Kubernetes 1.27+) and the legacy `job-name`, each with its controller-uid key set to the uid of the Job read
  now, as the Job controller's own selector asks: only that controller's pods carry the key (the training
  operator before v1.6 put a bare `job-name` on its pods too), and pods an earlier Job of the same name left
  running (deleted with `--cascade=orphan`) carry that Job's uid. A Job that is not there has no such pods.

The lead pod (gpuval's `lead` role, the MPI launcher, the PyTorch master, the indexed Job's index 0) comes first.

An exec's standard output is read up to EXEC_OUTPUT_BYTES: a probe answers one document of at most
MAX_PIECES pieces of PIECE_BYTES (about 1 MB); a container that prints more is cut there and the exec closed, so a
flood costs the operator's process a bounded buffer, never the whole stream.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from gpuval.engines.kubernetes.client import call, read
from gpuval.engines.kubernetes.manifests import LABEL
from gpuval.results.pieces import MAX_PIECES, PIECE_BYTES

_KUBEFLOW_JOB = "training.kubeflow.org/job-name"
_KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
_KUBEFLOW_ROLE = "training.kubeflow.org/job-role"
_OPERATOR = {"MPIJob": "mpi-operator", "PyTorchJob": "pytorchjob-controller"}
_BATCH = (("batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid"), ("job-name", "controller-uid"))
# What marks the lead pod: gpuval's role label, the operators' role label, an indexed Job's completion index.
_LEAD = (("gpuval.io/role", "lead"), (_KUBEFLOW_ROLE, "launcher"), (_KUBEFLOW_ROLE, "master"),
         ("batch.kubernetes.io/job-completion-index", "0"))

EXEC_OUTPUT_BYTES = 4 * MAX_PIECES * PIECE_BYTES  # an exec's standard output kept: four times the largest answer
EXEC_ERROR_BYTES = 64 << 10  # its standard error kept: only the first complaint in it is read


def selectors(kind: str, name: str, uid: str | None = None) -> list[str]:
    """The label selectors whose union is the pods of the job `kind` `name`; a batch Job's controller's need the
    Job's `uid` (None: no Job of that name now, so none of them)."""
    found = [f"{LABEL}={name}"]
    if kind in _OPERATOR:
        found.append(f"{_KUBEFLOW_JOB}={name},{_KUBEFLOW_OPERATOR}={_OPERATOR[kind]}")
    elif uid:
        found += [f"{job}={name},{key}={uid}" for job, key in _BATCH]
    return found


def is_lead(pod: Any) -> bool:
    """Whether the pod leads its job (launcher, master, index 0, gpuval's lead)."""
    labels = pod.metadata.labels or {}
    return any(labels.get(key) == value for key, value in _LEAD)


def job_pods(core: Any, namespace: str, kind: str, name: str) -> list[Any]:
    """The job's pods (CoreV1Api `core`), each once, the lead pod first, then by name."""
    pods: dict[str, Any] = {}
    uid = None
    if kind not in _OPERATOR:
        job = read(core.api_client, kind, name, namespace)
        uid = (job or {}).get("metadata", {}).get("uid")
    for selector in selectors(kind, name, uid):
        for pod in call("list pods", core.list_namespaced_pod, namespace, label_selector=selector).items:
            pods.setdefault(pod.metadata.name, pod)
    return sorted(pods.values(), key=lambda p: (not is_lead(p), p.metadata.name))


@dataclass
class ExecAnswer:
    """What one exec printed (each stream kept to its limit) and its exit status (None: it did not end, or its
    end said no status); `cut`: its standard output passed the limit, and the exec was closed there."""

    out: str
    err: str
    code: int | None
    cut: bool


def read_exec(resp: Any, timeout_s: float, out_limit: int = EXEC_OUTPUT_BYTES,
              err_limit: int = EXEC_ERROR_BYTES) -> ExecAnswer:
    """Read an exec (the client's WSClient) frame by frame, Kubernetes' channel protocol: 1 standard output, 2
    standard error, 3 the exit status; until the status comes and the server closes, `timeout_s` pass, or the
    output passes `out_limit` bytes. Not the client's own `update`: it reads every frame already waiting in one
    call, and it keeps a copy of all output besides, so a flood would be held whole before any limit could act."""
    from websocket import ABNF, WebSocketException

    out, err, status = _Kept(out_limit), _Kept(err_limit), _Kept(err_limit)
    streams = {1: out, 2: err, 3: status}
    deadline = time.monotonic() + timeout_s
    while not out.cut and (left := deadline - time.monotonic()) > 0:
        resp.sock.settimeout(left)
        try:
            opcode, frame = resp.sock.recv_data_frame(True)
        except (WebSocketException, OSError):  # the deadline passed, or the connection went
            break
        if opcode == ABNF.OPCODE_CLOSE:
            break
        data = frame.data if isinstance(frame.data, bytes) else str(frame.data).encode()
        if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) and data[:1] and data[0] in streams:
            streams[data[0]].add(data[1:])
    code = None if out.cut else _exit_code(status.data())
    return ExecAnswer(out.data().decode("utf-8", "replace"), err.data().decode("utf-8", "replace"), code, out.cut)


class _Kept:
    """Bytes read in chunks, kept up to `limit`; `cut` once more came."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size, self.cut = limit, 0, False
        self.chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if len(chunk) > room:
            chunk, self.cut = chunk[:room], True
        self.chunks.append(chunk)
        self.size += len(chunk)

    def data(self) -> bytes:
        return b"".join(self.chunks)


def _exit_code(status: bytes) -> int | None:
    """The exit status from the status channel's Status: 0 on Success, else its ExitCode cause."""
    try:
        said = json.loads(status)
    except ValueError:
        return None
    if not isinstance(said, dict):
        return None
    if said.get("status") == "Success":
        return 0
    for cause in (said.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                return None
    return None
