"""`gpuval deploy kubernetes`: the DaemonSet / CronJob and their RBAC, validated against the Kubernetes API schemas
(kubernetes-validate, strict: an unknown or misspelled field fails) and applied through the official client to
kmock, an in-memory Kubernetes API emulator on 127.0.0.1 (no API server can run here). kmock keeps no state for
PUT (replace): that path is checked on the requests gpuval sends, with the answer an API server gives. kmock 0.8
cannot parse POST /api/v1/namespaces (it reads "namespaces" as the namespace segment and answers 500), so the
--create-namespace object is checked against the schema only, never sent."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import kmock
import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.launch import IMAGE_REPOSITORY, default_image
from gpuval.engines.nodes import TAINT_KEY, this_node
from gpuval.errors import UsageError
from gpuval.operate.deploy import DeployOptions, admission_guard, image_note, manifests
from tests.conftest import run_gpuval
from tests.helpers.kube import kubeconfig_for

VARIANTS = {
    "daemonset": DeployOptions(),
    "daemonset-unprivileged": DeployOptions(kernel_log=False, textfile_dir="/var/lib/node_exporter/textfile",
                                            node_selector={"agentpool": "gpu"}, sku="Standard_ND96isr_H100_v5"),
    "cronjob": DeployOptions(schedule="0 3 * * 0", nodes=4, gpus=8),
    "cronjob-unprivileged": DeployOptions(schedule="@daily", kernel_log=False, drain=False, namespace="ops",
                                          create_namespace=True),
}
RESOURCES = {  # what the emulator serves: group/version/plural -> kind, namespaced
    "v1/serviceaccounts": ("ServiceAccount", True),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False),
    "apps/v1/daemonsets": ("DaemonSet", True), "batch/v1/cronjobs": ("CronJob", True),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicies": ("ValidatingAdmissionPolicy", False),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings": ("ValidatingAdmissionPolicyBinding", False),
}


def _pod(obj: dict) -> dict:
    spec = obj["spec"]
    return (spec["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else spec)["template"]["spec"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("version", ["1.30", "1.33"])
def test_every_manifest_validates_against_the_api_schema(variant: str, version: str):
    for obj in manifests(VARIANTS[variant]):
        kubernetes_validate.validate(obj, version, strict=True)


def test_rbac_is_nodes_get_list_and_patch_and_nothing_more():
    """list: the drain brake counts the nodes under gpuval's taint before a pod taints its own."""
    account, role, binding, _policy, _guard, daemonset = manifests(DeployOptions())
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": "kube-system"}]
    assert _pod(daemonset)["serviceAccountName"] == account["metadata"]["name"]
    assert daemonset["metadata"]["namespace"] == account["metadata"]["namespace"] == "kube-system"
    # A namespace of its own: hostPath volumes (and a privileged pod) are refused under Pod Security's baseline.
    namespace, account, *_ = manifests(VARIANTS["cronjob-unprivileged"])
    assert namespace["kind"] == "Namespace" and namespace["metadata"]["name"] == account["metadata"]["namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def _acts_on_its_node(container: dict) -> None:
    """The pod's gpuval finds its node's name where every gpuval pod has it, from the downward API: the node the
    scheduler put the pod on, never the pod's own host name (what `health --drain` acted on without --node)."""
    [entry] = [e for e in container["env"] if e["name"] == "GPUVAL_NODE_NAME"]
    assert entry == {"name": "GPUVAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert this_node({"GPUVAL_NODE_NAME": "aks-gpu-7", "HOSTNAME": "gpuval-health-x2k9q"}) == "aks-gpu-7"


def test_daemonset_asks_no_gpu_tolerates_gpuvals_taint_and_runs_the_quick_check():
    daemonset = manifests(DeployOptions())[-1]
    pod = _pod(daemonset)
    [container] = pod["containers"]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # never takes GPUs from jobs
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["GPUVAL_STATE_DIR"] == "/var/lib/gpuval"  # where the CronJob's full runs keep their result
    assert container["command"][-2:] == ["--quick", "--drain"]  # the node: GPUVAL_NODE_NAME (below)
    _acts_on_its_node(container)
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]  # gpuval's taint, GPU pools'
    assert {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True} in container["volumeMounts"]
    assert container["securityContext"] == {"privileged": True}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["key"] for t in terms] == ["nvidia.com/gpu.present",
                                                                 "kubernetes.azure.com/accelerator"]
    unprivileged = _pod(manifests(VARIANTS["daemonset-unprivileged"])[-1])
    assert unprivileged["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert unprivileged["nodeSelector"] == {"agentpool": "gpu"} and "affinity" not in unprivileged


def test_the_daemonset_loop_passes_its_arguments_untouched_and_survives_a_failed_check(tmp_path: Path):
    """The container's own /bin/sh script, run here with a stand-in gpuval that records its arguments: a failing
    check (exit 1) does not end the loop, and no argument is split or expanded by the shell."""
    container = _pod(manifests(VARIANTS["daemonset-unprivileged"])[-1])["containers"][0]
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "gpuval"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "--" >> {log}\n'
                    f'[ "$(grep -c -- "^--$" {log})" -ge 2 ] && kill "$PPID"\nexit 1\n')
    fake.chmod(0o755)
    argv = container["command"]
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "GPUVAL_INTERVAL_S": "0",
           "GPUVAL_NODE_NAME": "n1; rm -rf / $(id)"}  # a hostile node name reaches no argument
    proc = subprocess.run(argv, env=env, timeout=30, capture_output=True)
    assert proc.returncode != 0  # the stand-in ended the loop after its second call
    calls = log.read_text().split("--\n")[:2]
    expected = ["health", "--quick", "--drain", "--sku", "Standard_ND96isr_H100_v5",
                "--prometheus", "/var/lib/gpuval-textfile/gpuval.prom"]
    assert [c.splitlines() for c in calls] == [expected, expected]


def test_cronjob_runs_full_checks_one_pod_per_idle_node():
    cronjob = manifests(VARIANTS["cronjob"])[-1]
    assert cronjob["spec"]["schedule"] == "0 3 * * 0" and cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    job = cronjob["spec"]["jobTemplate"]["spec"]
    assert job["parallelism"] == job["completions"] == 4
    pod = _pod(cronjob)
    [container] = pod["containers"]
    assert container["command"] == ["gpuval", "health", "--drain"]
    _acts_on_its_node(container)
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "8"}  # placed only where 8 GPUs are free
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"operator": "Exists", "effect": "NoSchedule"} not in pod["tolerations"]  # not an admin's taint
    report_only = _pod(manifests(VARIANTS["cronjob-unprivileged"])[-1])["containers"][0]
    assert "--drain" not in report_only["command"] and "IPC_LOCK" in json.dumps(report_only["securityContext"])


def test_the_drain_cap_goes_to_every_health_run():
    """--max-drain as the site chose it, on each pod's `gpuval health --drain` (each pod acts alone: the cap is
    counted in the cluster, operate.brake)."""
    daemonset = manifests(DeployOptions(max_drain="10%"))[-1]
    assert _pod(daemonset)["containers"][0]["command"][-4:] == ["--quick", "--drain", "--max-drain", "10%"]
    cronjob = manifests(DeployOptions(schedule="@daily", max_drain="ALL"))[-1]
    assert _pod(cronjob)["containers"][0]["command"] == ["gpuval", "health", "--drain", "--max-drain", "all"]
    assert "--max-drain" not in _pod(manifests(DeployOptions(drain=False, max_drain="3"))[-1])["containers"][0]["command"]


def test_image_default_and_override(monkeypatch):
    monkeypatch.delenv("GPUVAL_IMAGE", raising=False)
    assert default_image().startswith(f"{IMAGE_REPOSITORY}:")
    assert _pod(manifests(DeployOptions())[-1])["containers"][0]["image"] == default_image()
    monkeypatch.setenv("GPUVAL_IMAGE", "myacr.azurecr.io/gpuval:7")
    assert _pod(manifests(DeployOptions())[-1])["containers"][0]["image"] == "myacr.azurecr.io/gpuval:7"


@pytest.mark.parametrize("args,message", [
    (["--schedule", "0 3 * *\n* 0"], "cron fields"),
    (["--image", "img:1 --privileged"], "no space"),
    (["--namespace", "GPU Val"], "not a DNS label"),
    (["--textfile-dir", "relative/dir"], "absolute path"),
    (["--node-selector", "novalue"], "LABEL=VALUE"),
    (["--max-drain", "5%\n--privileged"], "give a number of nodes"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], message: str):
    proc = run_gpuval("deploy", "kubernetes", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_dry_run_is_a_yaml_stream_kubectl_reads(tmp_path: Path):
    proc = run_gpuval("deploy", "kubernetes", "--schedule", "@weekly", "--dry-run", "--output", str(tmp_path / "m"))
    assert proc.returncode == 0, proc.stderr
    objects = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CronJob"]
    assert sorted(p.name for p in (tmp_path / "m").iterdir())[-1] == "06-cronjob-gpuval-health.yaml"


def _declare(server: kmock.RawHandler) -> None:
    for resource, (kind, namespaced) in RESOURCES.items():
        server.resources[resource] = {"kind": kind, "namespaced": namespaced}


@pytest.mark.asyncio
async def test_apply_creates_every_object_then_replaces_them(kmock):
    _declare(kmock)
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    objects = manifests(VARIANTS["daemonset"])
    done = await asyncio.to_thread(KubernetesEngine(api_client=api).apply, objects)
    assert done == [f"created {o['kind']} {o['metadata']['name']}" for o in objects]
    assert kmock.objects["apps/v1/daemonsets", "kube-system", "gpuval-health"] >= objects[-1]  # and the server's uid
    assert kmock.objects["rbac.authorization.k8s.io/v1/clusterroles", None, "gpuval-health"]["rules"] == \
        objects[1]["rules"]

    # Deploying again (new options): each object exists (409) and is replaced (PUT) with the new one.
    for obj in objects:
        kmock["put", _path(obj)] << (lambda request: request.data)
    again = manifests(DeployOptions(interval_s=60))
    done = await asyncio.to_thread(KubernetesEngine(api_client=api).apply, again)
    assert done == [f"replaced {o['kind']} {o['metadata']['name']}" for o in again]
    [put] = [r for r in kmock if r.method == "PUT" and r.url.path.endswith("/daemonsets/gpuval-health")]
    assert put.data == again[-1] and "'60'" in repr(put.data)


def _path(obj: dict) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "DaemonSet": "daemonsets",
              "ClusterRoleBinding": "clusterrolebindings", "CronJob": "cronjobs",
              "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[obj["kind"]]
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{plural}/{obj['metadata']['name']}" if ns else f"{base}/{plural}/" \
        f"{obj['metadata']['name']}"


@pytest.mark.asyncio
async def test_cli_applies_through_a_kubeconfig(kmock, tmp_path: Path):
    """`gpuval deploy kubernetes` in a subprocess, with a kubeconfig that points at the emulator."""
    _declare(kmock)
    kubeconfig = kubeconfig_for(kmock, tmp_path / "kubeconfig")
    proc = await asyncio.to_thread(run_gpuval, "deploy", "kubernetes", "--schedule", "0 */6 * * *", "--json",
                                   env={"KUBECONFIG": str(kubeconfig), "GPUVAL_IMAGE": "img:2"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["applied"][-1] == "created CronJob gpuval-health"
    cronjob = kmock.objects["batch/v1/cronjobs", "kube-system", "gpuval-health"].raw
    assert _pod(cronjob)["containers"][0]["image"] == "img:2"


def test_no_cluster_is_a_one_line_error(tmp_path: Path):
    env = {"KUBECONFIG": str(tmp_path / "none"), "KUBERNETES_SERVICE_HOST": ""}
    proc = run_gpuval("deploy", "kubernetes", env=env)
    assert proc.returncode == 2 and "no usable kubeconfig" in proc.stderr, proc.stderr
    with pytest.raises(UsageError, match="cannot apply"):
        KubernetesEngine(api_client=object()).apply([{"kind": "StatefulSet", "metadata": {"name": "x"}}])


# ---- hostile input: the output folder, system folders, selectors, digests, the admission policy ------------------

DIGEST = "ghcr.io/gpuval/gpuval@sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("args,message", [
    (["--textfile-dir", "/"], "system folder"),
    (["--textfile-dir", "/etc"], "system folder"),
    (["--textfile-dir", "/etc/cron.d"], "system folder"),
    (["--textfile-dir", "/var/lib/../../etc"], "system folder"),
    (["--node-selector", "a=b\nc"], "label"),
    (["--node-selector", "agentpool=gpu pool"], "label"),
    (["--image", "ghcr.io/gpuval/gpuval@sha256:abc"], "digest"),
])
def test_system_folders_multi_line_selectors_and_bad_digests_are_refused(args: list[str], message: str):
    proc = run_gpuval("deploy", "kubernetes", *args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_image_can_be_pinned_by_digest():
    objects = manifests(DeployOptions(image=DIGEST))
    assert _pod(objects[-1])["containers"][0]["image"] == DIGEST
    kubernetes_validate.validate(objects[-1], "1.33", strict=True)


def test_output_writes_only_inside_its_folder_and_removes_its_stale_manifests(tmp_path: Path):
    out, outside = tmp_path / "m", tmp_path / "outside.yaml"
    first = run_gpuval("deploy", "kubernetes", "--dry-run", "-o", str(out))  # a DaemonSet first
    assert first.returncode == 0 and (out / "06-daemonset-gpuval-health.yaml").exists(), first.stderr
    outside.write_text("kept\n")
    (out / "06-cronjob-gpuval-health.yaml").symlink_to(outside)  # a link out of the folder, where it will write
    (out / "README").write_text("mine\n")
    second = run_gpuval("deploy", "kubernetes", "--schedule", "@weekly", "--dry-run", "-o", str(out))
    assert second.returncode == 0, second.stderr
    assert outside.read_text() == "kept\n"  # the link was replaced, not followed
    assert not (out / "06-cronjob-gpuval-health.yaml").is_symlink()
    names = sorted(p.name for p in out.iterdir())
    assert "06-daemonset-gpuval-health.yaml" not in names  # the earlier mode's manifest is gone
    assert names == ["01-serviceaccount-gpuval-health.yaml", "02-clusterrole-gpuval-health.yaml",
                     "03-clusterrolebinding-gpuval-health.yaml",
                     "04-validatingadmissionpolicy-gpuval-health-own-node.yaml",
                     "05-validatingadmissionpolicybinding-gpuval-health-own-node.yaml",
                     "06-cronjob-gpuval-health.yaml", "README"]


def test_the_node_patch_is_guarded_by_default_and_the_guard_names_the_deployed_account():
    """The default output binds `patch nodes` only with its guard: a ValidatingAdmissionPolicy (valid objects of the
    Kubernetes 1.30 API) bound to the ServiceAccount `gpuval deploy kubernetes` makes; `--no-admission-policy`
    leaves it out and says what that means."""
    objects = manifests(DeployOptions(namespace="ops", name="gv"))
    account = objects[0]["metadata"]
    policy, binding = [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, "1.30", strict=True)
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert f"system:serviceaccount:{account['namespace']}:{account['name']}" in json.dumps(policy)
    assert [o["kind"] for o in manifests(DeployOptions(admission_policy=False))][-2] == "ClusterRoleBinding"
    proc = run_gpuval("deploy", "kubernetes", "--no-admission-policy", "--dry-run")
    assert proc.returncode == 0 and "may patch every node" in proc.stderr, proc.stderr


def _admitted(node_name: str, old: dict, new: dict, user: str = "system:serviceaccount:kube-system:gpuval-health"):
    """(matched, [messages of the validations that refuse]) of the guard for one node UPDATE, evaluated with
    cel-python (the CEL the API server evaluates; its Kubernetes type checker does not run here)."""
    import celpy

    policy = admission_guard(DeployOptions())[0]["spec"]
    env = celpy.Environment()
    request = {"userInfo": {"username": user, "extra": {"authentication.kubernetes.io/node-name": [node_name]}}}
    values = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(new),
              "oldObject": celpy.json_to_cel(old)}

    def holds(expression: str) -> bool:
        return bool(env.program(env.compile(expression)).evaluate(values))

    matched = all(holds(c["expression"]) for c in policy["matchConditions"])
    return matched, [v["message"] for v in policy["validations"] if not holds(v["expression"])]


def _k8s_node(taints=(), labels=None, annotations=None, unschedulable=None, name="g1") -> dict:
    node: dict = {"metadata": {"name": name}, "spec": {}}
    if taints:
        node["spec"]["taints"] = list(taints)
    if labels:
        node["metadata"]["labels"] = labels
    if annotations:
        node["metadata"]["annotations"] = annotations
    if unschedulable is not None:
        node["spec"]["unschedulable"] = unschedulable
    return node


OWN_TAINT = {"key": TAINT_KEY, "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}


@pytest.mark.parametrize("case, old, new, refused", [
    ("gpuval taints its own node", _k8s_node([GPU], {"pool": "gpu"}),
     _k8s_node([GPU, OWN_TAINT], {"pool": "gpu", "gpuval.io/health": "fail"},
               {"gpuval.io/health-faults": "ECC_ERRORS"}), []),
    ("gpuval untaints its own node", _k8s_node([OWN_TAINT, GPU]), _k8s_node([GPU]), []),
    ("another node", _k8s_node(name="g2"), _k8s_node([OWN_TAINT], name="g2"),
     ["gpuval's pods may change only the node they run on"]),
    ("an admin's taint removed", _k8s_node([GPU]), _k8s_node(), ["gpuval may add or remove only its own taint"]),
    ("a taint of its own choosing", _k8s_node(), _k8s_node([{"key": "x", "effect": "NoExecute"}]),
     ["gpuval may add or remove only its own taint"]),
    ("another label changed", _k8s_node(labels={"pool": "gpu"}), _k8s_node(labels={"pool": "cpu"}),
     ["gpuval may change only its own labels"]),
    ("another annotation added", _k8s_node(), _k8s_node(annotations={"a": "b"}),
     ["gpuval may change only its own annotations"]),
    ("cordoned", _k8s_node(), _k8s_node(unschedulable=True), ["gpuval never cordons"]),
])
def test_the_guard_lets_through_only_gpuvals_own_change_of_its_own_node(case, old, new, refused):
    matched, refusals = _admitted("g1", old, new)
    assert matched, case
    assert len(refusals) == len(refused) and all(r.startswith(x) for r, x in zip(refusals, refused)), (case, refusals)
    other = _admitted("g1", old, new, user="system:serviceaccount:kube-system:someone-else")
    assert not other[0]  # the policy matches gpuval's account only


def test_an_image_by_tag_is_a_warning_and_by_digest_none():
    assert "pin it by digest" in image_note(DeployOptions(image="ghcr.io/gpuval/gpuval:0.1.0"))
    assert image_note(DeployOptions(image=DIGEST)) == ""
    tagged = run_gpuval("deploy", "kubernetes", "--dry-run", env={"GPUVAL_IMAGE": "img:2"})
    assert tagged.returncode == 0 and "img:2 is named by tag" in tagged.stderr, tagged.stderr
    pinned = run_gpuval("deploy", "kubernetes", "--dry-run", "--image", DIGEST)
    assert pinned.returncode == 0 and "by tag" not in pinned.stderr, pinned.stderr
