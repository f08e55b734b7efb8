"""The pods of any job, found by the labels its controller puts on them and kept by who controls them, and the
output of a command run in one.

`jobs diagnose` reaches any job of a namespace, not only gpuval's. The API server is asked for the union of what
these label selectors find (each selector a list call; labels are ANDed within one, there is no OR across keys):

- gpuval's own `gpuval.io/job=NAME` (its pod templates carry it, whatever the kind);
- an MPIJob's (kubeflow/mpi-operator v0.3+, the v2beta1 API: pkg/controller/mpi_job_controller.go `defaultLabels`):
  `training.kubeflow.org/job-name=NAME` with `training.kubeflow.org/operator-name=mpi-operator`, on the launcher and
  the workers alike;
- a PyTorchJob's (kubeflow/training-operator v1.4+: pkg/controller.v1/common/job_controller.go `GenLabels`):
  `training.kubeflow.org/job-name=NAME` with `training.kubeflow.org/operator-name=pytorchjob-controller` (the
  operator name keeps a TFJob of the same name out);
- a batch Job's (kubernetes pkg/registry/batch/job/strategy.go `generateSelector`): `batch.kubernetes.io/job-name`
  (Kubernetes 1.27+) and the legacy `job-name`, each with its controller-uid key set to the uid of the Job read
  now, as the Job controller's own selector asks.

Labels say only what a pod was made as, not whose it is now: pods an earlier job of the same name left running
(deleted with `--cascade=orphan`: the labels stay, the garbage collector drops the owner reference) carry them, and
anyone may label a pod `gpuval.io/job=NAME`. So a pod found is the job's only where its controller owner reference
leads to the uid of the job object read now (red team 5 N7, red team 6 R5): directly (the Job controller, the
training operator's PyTorchJob and the MPI Operator's workers set the job as the pod's controller), or through a
batch Job the job controls (the MPI Operator v0.4+ runs the launcher as a Job owned by the MPIJob:
`newLauncherJob`). A job that is not there has no pods, whatever is left.

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


def selectors(kind: str, name: str, uid: str) -> list[str]:
    """The label selectors whose union holds the pods of the job `kind` `name` (uid `uid`): what the API server is
    asked for; job_pods keeps of them those the job owns."""
    found = [f"{LABEL}={name}"]
    if kind in _OPERATOR:
        found.append(f"{_KUBEFLOW_JOB}={name},{_KUBEFLOW_OPERATOR}={_OPERATOR[kind]}")
    else:
        found += [f"{job}={name},{key}={uid}" for job, key in _BATCH]
    return found


def is_lead(pod: Any) -> bool:
    """Whether the pod leads its job (launcher, master, index 0, gpuval's lead)."""
    labels = pod.metadata.labels or {}
    return any(labels.get(key) == value for key, value in _LEAD)


def job_pods(core: Any, namespace: str, kind: str, name: str) -> list[Any]:
    """The job's pods (CoreV1Api `core`), each once, the lead pod first, then by name: of the pods the selectors
    find, those the job object read now controls (`_Owners`). A job that is not there has none."""
    job = read(core.api_client, kind, name, namespace)
    uid = (job or {}).get("metadata", {}).get("uid")
    if not uid:
        return []
    owners = _Owners(core.api_client, namespace, uid)
    pods: dict[str, Any] = {}
    for selector in selectors(kind, name, uid):
        for pod in call("list pods", core.list_namespaced_pod, namespace, label_selector=selector).items:
            if pod.metadata.name not in pods and owners.leads_to_job(_controller(pod.metadata.owner_references)):
                pods[pod.metadata.name] = pod
    return sorted(pods.values(), key=lambda p: (not is_lead(p), p.metadata.name))


def _controller(refs: Any) -> dict[str, Any] | None:
    """The controller among owner references (the client's V1OwnerReference objects or a read object's dicts)."""
    for ref in refs or ():
        fields = ref if isinstance(ref, dict) else ref.to_dict()
        if fields.get("controller"):
            return fields
    return None


class _Owners:
    """Whether a pod's controller chain leads to the job of uid `uid`: the pod's controller is the job itself (a
    PyTorchJob's pods, an MPIJob's workers, a batch Job's pods), or a batch Job that the job controls (the MPI
    Operator v0.4+ runs the launcher under a Job it owns). Each intermediate Job is read once, and counts only while
    it is the object the reference names (its uid): a namesake made since is another's."""

    def __init__(self, api: Any, namespace: str, uid: str) -> None:
        self.api, self.namespace, self.uid = api, namespace, uid
        self._jobs: dict[str, bool] = {}

    def leads_to_job(self, ref: dict[str, Any] | None) -> bool:
        """Whether the controller reference `ref` (None: the pod has no controller) leads to the job."""
        if ref is None:
            return False
        if ref["uid"] == self.uid:
            return True
        if ref["kind"] != "Job":
            return False
        if ref["uid"] not in self._jobs:
            between = read(self.api, "Job", ref["name"], self.namespace) or {}
            meta = between.get("metadata", {})
            above = _controller(meta.get("ownerReferences"))
            self._jobs[ref["uid"]] = meta.get("uid") == ref["uid"] and above is not None and above["uid"] == self.uid
        return self._jobs[ref["uid"]]


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
