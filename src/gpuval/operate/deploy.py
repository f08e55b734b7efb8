"""`gpuval deploy kubernetes`: the objects that make a Kubernetes cluster run gpuval health on its GPU nodes by
itself and act on the verdict (label, taint), the way IBM Autopilot and Google's cluster-health-scanner do.

Two shapes:
- DaemonSet (default): one pod per GPU node runs `gpuval health --quick --drain` every `interval_s` seconds. It
  asks for no GPU (it reads NVML state and counters only; NVIDIA_VISIBLE_DEVICES=all makes the NVIDIA runtime
  mount the driver, as dcgm-exporter does), so it never takes GPUs from jobs, and it tolerates every NoSchedule
  taint, gpuval's own included: a node gpuval tainted is still checked, and untainted when it is healthy again.
- CronJob (`schedule`): each run starts `nodes` pods, one per node (pod anti-affinity), each asking for the node's
  `gpus` GPUs: the scheduler places them only where those GPUs are free, so the full (measuring) check runs on
  idle nodes only. It tolerates gpuval's taint (to clear it) and the usual GPU-pool taints, not an admin's.

The objects are created (or replaced) by the Kubernetes engine (`KubernetesEngine.apply`): this module only renders
them. RBAC is the least that works: a ServiceAccount whose ClusterRole may get, list and patch nodes, nothing more
(list: the drain brake counts the nodes under gpuval's taint before it taints one, operate.brake), and by default a
ValidatingAdmissionPolicy that lets the patch through only on the pod's own node and only to gpuval's own taint,
labels and annotations (`admission_guard`). Both
shapes keep gpuval's data (results, the last full result that --quick reads) on the node under /var/lib/gpuval.
The Xid check reads the kernel log: /dev/kmsg is a character device, which a container may open only when
privileged (the device cgroup denies it otherwise; node-problem-detector runs privileged for the same reason), so
`kernel_log` (default on) makes the pod privileged; without it the pod drops every capability.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuval.engines.launch import default_image
from gpuval.engines.nodes import TAINT_EFFECT, TAINT_KEY, node_name_env
from gpuval.operate.brake import parse_cap
from gpuval.results.files import write_beside

DATA_DIR = "/var/lib/gpuval"
TEXTFILE_MOUNT = "/var/lib/gpuval-textfile"
COMPONENT = "app.kubernetes.io/component"
# A GPU node: labelled by the NVIDIA GPU operator / GPU feature discovery, or an AKS GPU node pool.
GPU_NODE_TERMS = [
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
    {"matchExpressions": [{"key": "kubernetes.azure.com/accelerator", "operator": "Exists"}]},
]
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,?-]+")
_SAFE = re.compile(r"[A-Za-z0-9_.:/@+-]+")
_DIGEST = re.compile(r"[^@]+@sha256:[0-9a-f]{64}")
# Label syntax (one line, nothing a YAML or a shell reads twice): [prefix/]name, and a value of up to 63 characters.
_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# A hostPath the pod may write into: never a system folder or anything under one (a privileged pod writing there
# owns the node).
_SYSTEM_TREES = ("/etc", "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev", "/proc",
                 "/sys", "/root", "/run", "/var/run", "/var/lib/kubelet", "/var/lib/containerd", "/var/lib/docker")
_SYSTEM_FOLDERS = ("/", "/var", "/var/lib", "/home", "/opt", "/srv", "/tmp", "/mnt", "/media")
_OWN_FILE = re.compile(r"\d\d-(namespace|serviceaccount|clusterrole|clusterrolebinding|validatingadmissionpolicy|"
                       r"validatingadmissionpolicybinding|daemonset|cronjob)-(.+)\.yaml")
GUARD_SUFFIX = "-own-node"  # the ValidatingAdmissionPolicy (and its binding) that guards the node patch


class DeployOptions(BaseModel):
    """What `gpuval deploy kubernetes` renders (each field a command-line option)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field("kube-system", description="Namespace of the ServiceAccount and the DaemonSet/CronJob "
                                                       "(kube-system: exists everywhere, Pod Security privileged).")
    create_namespace: bool = Field(False, description="Create the namespace too (labelled Pod Security "
                                                      "privileged: the pods use hostPath).")
    name: str = Field("gpuval-health", description="Name of the objects.")
    image: str | None = Field(None, description="Image with gpuval [default: GPUVAL_IMAGE, else the gpuval image].")
    schedule: str | None = Field(None, description="Cron schedule: a CronJob of full checks on idle nodes "
                                                   "instead of the DaemonSet of quick checks.")
    interval_s: int = Field(300, ge=30, description="DaemonSet: seconds between two quick checks.")
    nodes: int = Field(1, ge=1, description="CronJob: nodes checked per run (one pod per node).")
    gpus: int = Field(8, ge=1, description="CronJob: GPUs each pod asks for (all of the node's).")
    node_selector: dict[str, str] | None = Field(None, description="Node labels to select GPU nodes [default: "
                                                 "nvidia.com/gpu.present=true or an AKS GPU pool].")
    sku: str | None = Field(None, description="VM size passed to gpuval health --sku [default: detected].")
    kernel_log: bool = Field(True, description="Mount /dev/kmsg for the Xid check (makes the pod privileged).")
    textfile_dir: str | None = Field(None, description="node_exporter textfile folder on the node: the DaemonSet "
                                                       "writes gpuval.prom there.")
    drain: bool = Field(True, description="Label and taint nodes on the verdict (off: report only).")
    max_drain: str | None = Field(None, description="The most nodes gpuval may hold tainted at once: N, a share "
                                                    "(5%) or all [default: gpuval health's, 5%].")
    admission_policy: bool = Field(True, description="Guard the node patch with a ValidatingAdmissionPolicy: the "
                                   "pod's own node only, gpuval's own taint, labels and annotations only "
                                   "(Kubernetes 1.30+).")

    @field_validator("namespace", "name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.fullmatch(value):
            raise ValueError(f"{value!r} is not a DNS label (lower-case letters, digits, '-', at most 63)")
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return value
        fields = value.split()
        if not (value.startswith("@") and len(fields) == 1 and value[1:].isalpha()) and not (
                len(fields) == 5 and all(_CRON_FIELD.fullmatch(f) for f in fields)):
            raise ValueError(f"schedule {value!r}: five cron fields (\"0 3 * * 0\") or a macro such as @daily")
        return " ".join(fields)

    @field_validator("image", "sku", "textfile_dir")
    @classmethod
    def _inert(cls, value: str | None) -> str | None:
        if value is not None and not _SAFE.fullmatch(value):
            raise ValueError(f"{value!r}: only letters, digits and _ . : / @ + - (no space, quote or newline)")
        return value

    @field_validator("max_drain")
    @classmethod
    def _cap(cls, value: str | None) -> str | None:
        return None if value is None else parse_cap(value, "max_drain").text  # inert: digits, '.', '%' or 'all'

    @field_validator("textfile_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith("/"):
            raise ValueError(f"textfile folder {value!r}: an absolute path on the node")
        folder = posixpath.normpath(value)
        if folder in _SYSTEM_FOLDERS or any(folder == t or folder.startswith(t + "/") for t in _SYSTEM_TREES):
            raise ValueError(f"textfile folder {value!r} is a system folder (or in one): the privileged pod would "
                             "write there; use node_exporter's own, e.g. /var/lib/node_exporter/textfile")
        return folder

    @field_validator("image")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and "@" in value and not _DIGEST.fullmatch(value):
            raise ValueError(f"image {value!r}: a digest is REPOSITORY@sha256: and 64 hex digits")
        return value

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, label in (value or {}).items():
            if not _LABEL_KEY.fullmatch(key) or not _LABEL_VALUE.fullmatch(label):
                raise ValueError(f"node selector {key}={label!r}: not a Kubernetes label (one line of letters, "
                                 "digits, '-', '_', '.', a '/' after a prefix)")
        return value


def _meta(opts: DeployOptions, name: str, namespaced: bool = True, component: str | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "gpuval", "app.kubernetes.io/managed-by": "gpuval"}
    if component:
        labels[COMPONENT] = component
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespaced:
        meta["namespace"] = opts.namespace
    return meta


def rbac(opts: DeployOptions) -> list[dict[str, Any]]:
    """[Namespace,] ServiceAccount, a ClusterRole that may get, list and patch nodes (nothing more), and its
    binding."""
    objects: list[dict[str, Any]] = []
    if opts.create_namespace:
        namespace = _meta(opts, opts.namespace, namespaced=False)
        # Pod Security's baseline level forbids hostPath volumes (and privileged pods): both shapes need them.
        namespace["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": namespace})
    return objects + [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(opts, opts.name)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": _meta(opts, opts.name, namespaced=False),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": _meta(opts, opts.name, namespaced=False),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": opts.name},
         "subjects": [{"kind": "ServiceAccount", "name": opts.name, "namespace": opts.namespace}]},
    ]


def _same_but_gpuvals(old: str, new: str, own: str) -> str:
    """CEL: every entry of the list or map `old` (a path under oldObject) that is not gpuval's (`own`: a CEL test
    on the entry `e`) is in `new` (the same path under object) unchanged, and the other way round. No ternaries:
    each side may be absent (an empty list or map is left out of a Node)."""
    def kept(a: str, b: str, same: str) -> str:
        return f"(!has({a}) || {a}.all(e, {own} || (has({b}) && {same})))"

    if own.startswith("e.key"):  # a list of taints: an entry is kept when it is in the other list
        return f"{kept(old, new, f'e in {new}')} && {kept(new, old, f'e in {old}')}"
    return (f"{kept(old, new, f'e in {new} && {new}[e] == {old}[e]')} && "
            f"{kept(new, old, f'e in {old} && {old}[e] == {new}[e]')}")


def admission_guard(opts: DeployOptions) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding that let the ServiceAccount's node patch through only on the
    node its pod runs on (the node name Kubernetes 1.30+ puts in a pod's token) and only to gpuval's own taint,
    labels and annotations: the ClusterRole's `patch nodes` alone would let one compromised pod untaint, taint or
    cordon every node. failurePolicy Fail: where the expression cannot be evaluated (a token without the node
    name) the patch is refused, never let through."""
    account = f"system:serviceaccount:{opts.namespace}:{opts.name}"
    extra = "request.userInfo.extra"
    node_key = "authentication.kubernetes.io/node-name"
    mine = "e.startsWith('gpuval.io/')"
    name = opts.name + GUARD_SUFFIX
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(opts, name, namespaced=False),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["UPDATE"], "resources": ["nodes"]}]},
            "matchConditions": [{"name": "gpuval-service-account",
                                 "expression": f"request.userInfo.username == '{account}'"}],
            "validations": [
                {"expression": f"has({extra}) && '{node_key}' in {extra} && "
                               f"{extra}['{node_key}'][0] == object.metadata.name",
                 "message": "gpuval's pods may change only the node they run on"},
                {"expression": _same_but_gpuvals("oldObject.spec.taints", "object.spec.taints",
                                                 f"e.key == '{TAINT_KEY}'"),
                 "message": f"gpuval may add or remove only its own taint ({TAINT_KEY})"},
                {"expression": _same_but_gpuvals("oldObject.metadata.labels", "object.metadata.labels", mine),
                 "message": "gpuval may change only its own labels (gpuval.io/)"},
                {"expression": _same_but_gpuvals("oldObject.metadata.annotations", "object.metadata.annotations",
                                                 mine),
                 "message": "gpuval may change only its own annotations (gpuval.io/)"},
                {"expression": "(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable) == "
                               "(has(object.spec.unschedulable) && object.spec.unschedulable)",
                 "message": "gpuval never cordons or uncordons a node"},
            ]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": _meta(opts, name, namespaced=False),
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return [policy, binding]


UNGUARDED = ("warning: --no-admission-policy: the pods' ServiceAccount may patch every node (taint, untaint, "
             "cordon): one compromised pod acts on the whole cluster")


def image_note(opts: DeployOptions) -> str:
    """A warning when the image is named by tag ("" when pinned by digest): a tag can be moved to another image, and
    the privileged pods on every GPU node would run whatever it names next."""
    image = opts.image or default_image()
    if _DIGEST.fullmatch(image):
        return ""
    return (f"warning: image {image} is named by tag, which can be moved to another image: pin it by digest for a "
            "fleet (--image REPOSITORY@sha256:<digest>)")


def health_args(opts: DeployOptions, quick: bool) -> list[str]:
    """The `gpuval health` arguments. No --node: gpuval health finds the node's name in GPUVAL_NODE_NAME, which the
    pod gets from the downward API (engines.nodes.this_node); it keys the last full result the CronJob keeps and
    the DaemonSet's --quick reads (a pod's host name is the pod's, not the node's)."""
    args = ["--quick"] if quick else []
    if opts.drain:
        args += ["--drain"] + (["--max-drain", opts.max_drain] if opts.max_drain else [])
    if opts.sku:
        args += ["--sku", opts.sku]
    if quick and opts.textfile_dir:
        args += ["--prometheus", f"{TEXTFILE_MOUNT}/gpuval.prom"]
    return args


def _volumes(opts: DeployOptions, quick: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "gpuval-data",
                                      "hostPath": {"path": DATA_DIR, "type": "DirectoryOrCreate"}}]
    mounts: list[dict[str, Any]] = [{"name": "gpuval-data", "mountPath": DATA_DIR}]
    if opts.kernel_log:
        volumes.append({"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}})
        mounts.append({"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True})
    if quick and opts.textfile_dir:
        volumes.append({"name": "textfile", "hostPath": {"path": opts.textfile_dir, "type": "DirectoryOrCreate"}})
        mounts.append({"name": "textfile", "mountPath": TEXTFILE_MOUNT})
    if not quick:  # NCCL and pinned copies need shared memory beyond the 64 MiB default
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _container(opts: DeployOptions, quick: bool) -> dict[str, Any]:
    env = [node_name_env(),  # the node's name: what --drain acts on, whatever the pod is called
           {"name": "XDG_DATA_HOME", "value": DATA_DIR},  # results and store on the node
           {"name": "GPUVAL_STATE_DIR", "value": DATA_DIR}]  # the last full result, shared by both shapes
    if quick:
        # No GPU asked: the NVIDIA runtime mounts the driver (NVML) for every GPU; utility = NVML only.
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                {"name": "GPUVAL_INTERVAL_S", "value": str(opts.interval_s)}]
        # sh only loops; the arguments reach gpuval as "$@", never parsed by the shell.
        command = ["/bin/sh", "-c", 'while :; do gpuval health "$@"; sleep "$GPUVAL_INTERVAL_S"; done', "gpuval",
                   *health_args(opts, quick)]
        resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    else:
        command = ["gpuval", "health", *health_args(opts, quick)]
        resources = {"limits": {"nvidia.com/gpu": str(opts.gpus)}, "requests": {"nvidia.com/gpu": str(opts.gpus)}}
    if opts.kernel_log:
        security: dict[str, Any] = {"privileged": True}
    elif quick:
        security = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    else:  # pinned host memory for the copies and RDMA
        security = {"privileged": False, "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}
    _, mounts = _volumes(opts, quick)
    return {"name": "health", "image": opts.image or default_image(), "command": command, "env": env,
            "resources": resources, "securityContext": security, "volumeMounts": mounts}


def _pod_spec(opts: DeployOptions, quick: bool, component: str) -> dict[str, Any]:
    volumes, _ = _volumes(opts, quick)
    spec: dict[str, Any] = {"serviceAccountName": opts.name, "containers": [_container(opts, quick)],
                            "volumes": volumes}
    affinity: dict[str, Any] = {}
    if opts.node_selector:
        spec["nodeSelector"] = dict(opts.node_selector)
    else:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution":
                                    {"nodeSelectorTerms": GPU_NODE_TERMS}}
    if quick:
        spec["tolerations"] = [{"operator": "Exists", "effect": "NoSchedule"}]
    else:
        spec["restartPolicy"] = "Never"
        spec["tolerations"] = [{"key": TAINT_KEY, "operator": "Exists", "effect": TAINT_EFFECT},
                               {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                               {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        # One pod per node; matchLabelKeys (Kubernetes 1.31+) counts only this run's pods, not an earlier run's.
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {COMPONENT: component}}, "topologyKey": "kubernetes.io/hostname",
            "matchLabelKeys": ["batch.kubernetes.io/controller-uid"]}]}
    if affinity:
        spec["affinity"] = affinity
    return spec


def workload(opts: DeployOptions) -> dict[str, Any]:
    """The DaemonSet of quick checks, or with a schedule the CronJob of full checks."""
    quick = opts.schedule is None
    component = "health-quick" if quick else "health-full"
    template = {"metadata": {"labels": {"app.kubernetes.io/name": "gpuval", COMPONENT: component}},
                "spec": _pod_spec(opts, quick, component)}
    if quick:
        return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(opts, opts.name, component=component),
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "gpuval", COMPONENT: component}},
                         "updateStrategy": {"type": "RollingUpdate"}, "template": template}}
    job = {"parallelism": opts.nodes, "completions": opts.nodes, "backoffLimit": 0,
           "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 86400, "template": template}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": _meta(opts, opts.name, component=component),
            "spec": {"schedule": opts.schedule, "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 600,
                     "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3, "jobTemplate": {"spec": job}}}


def manifests(opts: DeployOptions) -> list[dict[str, Any]]:
    """Every object, in creation order (pure): RBAC, the guard of its node patch (unless turned off), the
    workload last."""
    guard = admission_guard(opts) if opts.admission_policy else []
    return [*rbac(opts), *guard, workload(opts)]


@dataclass
class Manifests:
    """The deployment as files (one YAML per object, numbered in creation order) and the objects behind them."""

    files: dict[str, str]
    objects: list[dict[str, Any]]

    def write(self, directory: Path) -> list[Path]:
        """Write every file into `directory` (created) and remove this deployment's files of an earlier mode (the
        DaemonSet's when it is now a CronJob); returns the paths. Each file is written beside and renamed over
        its name, so a symlink there is replaced, never followed out of the folder. No secret: plain files."""
        directory.mkdir(parents=True, exist_ok=True)
        written = [write_beside(directory, name, body, 0o644, folder_link=True) for name, body in self.files.items()]
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for stale in self._stale(os.listdir(folder)):
                os.unlink(stale, dir_fd=folder)  # a link is removed, not what it points to
        finally:
            os.close(folder)
        return written

    def _stale(self, present: list[str]) -> list[str]:
        """Files this deployment (same object name) wrote earlier that it does not write now."""
        names = {self.objects[-1]["metadata"]["name"]}
        return [f for f in present if f not in self.files and (m := _OWN_FILE.fullmatch(f)) and m.group(2) in names]


def render(opts: DeployOptions) -> Manifests:
    """What --dry-run prints and --output writes (pure)."""
    objects = manifests(opts)
    files = {f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml": yaml.safe_dump(o, sort_keys=False)
             for i, o in enumerate(objects, 1)}
    return Manifests(files, objects)


def yaml_stream(rendered: Manifests) -> str:
    """The manifests as one multi-document YAML stream (`gpuval deploy kubernetes --dry-run | kubectl apply -f -`)."""
    return "".join(f"---\n# {name}\n{body}" for name, body in rendered.files.items())
