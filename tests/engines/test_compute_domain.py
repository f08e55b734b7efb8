"""Multi-node NVLink jobs on Kubernetes get a ComputeDomain (NVIDIA's DRA driver) and their GPU pods a claim on its
IMEX channel, as the driver's documented example has them (engines/kubernetes/domain.py): the render against a
golden file and the CRD's schema (tests/data/k8s-crds), the core schema of the pods' claims (kubernetes-validate),
when a job gets one, and submit/cancel through the official client against the project's kmock (no API server can
run here; tests/helpers/kube.py's ApiServer gives objects a uid, as an API server does, and runs no garbage collector
and no DRA controller, so ownership is checked as written)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
from kubernetes import client

from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.spec import Launcher
from gpuval.errors import EngineError, UsageError
from tests.conftest import run_gpuval
from tests.engines import crds
from tests.engines.specs import nccl_spec
from tests.engines.test_kubernetes import _api, _declare
from tests.engines.test_render import _golden

PROFILE = str(Path(__file__).parent / "data" / "gb200-nvl72.profile.yaml")
CD = "resource.nvidia.com/v1beta1/computedomains"


def _tray_spec(**overrides):
    """2 GB200 trays of 4 GPUs, the site's tray profile naming the GPU model (tests/engines/data)."""
    return nccl_spec(**{"sku": None, "gpus_per_node": 4, "baselines": [PROFILE], **overrides})


def _pods(job: dict) -> dict[str, dict]:
    """Each replica's pod spec by role (the indexed Job's one template as `main`)."""
    replicas = job["spec"].get("mpiReplicaSpecs") or job["spec"].get("pytorchReplicaSpecs")
    if replicas is None:
        return {"main": job["spec"]["template"]["spec"]}
    return {role: r["template"]["spec"] for role, r in replicas.items()}


def test_a_tray_job_renders_its_compute_domain_first_and_its_workers_claim_the_channel():
    """The dry run's manifests of an MPIJob on two GB200 trays (golden): the ComputeDomain, valid by the DRA
    driver's CRD schema, numNodes 2, naming the claim template each worker pod claims from, as the driver's
    nvbandwidth example; the launcher, which runs no GPU work, claims nothing; the MPIJob valid by its own CRD."""
    rendered = KubernetesEngine({"namespace": "gpu"}).render(_tray_spec())
    assert rendered.text() == _golden("gb200-nccl.mpijob-computedomain.yaml", rendered.text())
    domain, job = rendered.objects
    name = rendered.job_name
    crds.validate(domain, crds.COMPUTE_DOMAIN)
    crds.validate(job, crds.MPIJOB)
    template = f"{name}-compute-domain-channel"
    assert domain["metadata"] == {"name": f"{name}-compute-domain", "namespace": "gpu",
                                  "labels": {"gpuval.io/job": name}}
    assert domain["spec"] == {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": template}}}
    pods = _pods(job)
    assert pods["Worker"]["resourceClaims"] == [{"name": "compute-domain-channel",
                                                 "resourceClaimTemplateName": template}]
    assert pods["Worker"]["containers"][0]["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    assert "resourceClaims" not in pods["Launcher"] and "resources" not in pods["Launcher"]["containers"][0]


def test_every_gpu_pod_of_a_pytorchjob_and_an_indexed_job_claims_it():
    """The PyTorchJob's master and workers and the indexed Job's pods all run GPU work: each claims the channel.
    The indexed Job is valid by Kubernetes 1.34's own schema (DRA is GA there; the driver needs 1.34.2+), strictly:
    the claim's fields are where the core API has them."""
    torch = KubernetesEngine({"kind": "PyTorchJob"}).render(_tray_spec(launcher=Launcher.TORCHRUN, nodes=3))
    domain, job = torch.objects
    assert domain["spec"]["numNodes"] == 3
    crds.validate(job, crds.PYTORCHJOB)
    assert {role: len(pod["resourceClaims"]) for role, pod in _pods(job).items()} == {"Master": 1, "Worker": 1}
    indexed = KubernetesEngine({"kind": "Job"}).render(_tray_spec(launcher=Launcher.TORCHRUN))
    assert [o["kind"] for o in indexed.objects] == ["ComputeDomain", "Service", "Job"]
    for obj in indexed.objects[1:]:
        kubernetes_validate.validate(obj, "1.34", strict=True)
    assert _pods(indexed.objects[-1])["main"]["containers"][0]["resources"]["claims"] == [
        {"name": "compute-domain-channel"}]


@pytest.mark.parametrize("overrides,opt,gets", [
    ({}, {}, True),                                                    # the profile names GB200, 2 nodes
    ({"nodes": 1}, {}, False),                                         # one tray: no IMEX across trays
    ({}, {"compute_domain": "false"}, False),
    ({"sku": "Standard_ND96asr_v4", "baselines": [], "gpus_per_node": 8}, {}, False),  # an HGX SKU
    ({"sku": "Standard_ND96asr_v4", "baselines": [], "gpus_per_node": 8}, {"compute_domain": "true"}, True),
])
def test_when_a_job_gets_one(overrides, opt, gets):
    rendered = KubernetesEngine({"kind": "MPIJob", **opt}).render(_tray_spec(**overrides))
    assert ("ComputeDomain" in [o["kind"] for o in rendered.objects]) is gets


def test_a_profile_that_says_no_multi_node_nvlink_wins_over_the_gpu_model(tmp_path):
    """`fabric.multi_node_nvlink: false` (a GB200 NVL4 board, or a site that runs IMEX itself) turns auto off, as it
    turns off the fabric check's multi-node rules on the node; a bad option value is one line."""
    profile = tmp_path / "nvl4.yaml"
    profile.write_text(Path(PROFILE).read_text() + "fabric: {multi_node_nvlink: false}\n")
    spec = _tray_spec(baselines=[str(profile)])
    assert not spec.multi_node_nvlink and _tray_spec().multi_node_nvlink
    assert [o["kind"] for o in KubernetesEngine({"kind": "MPIJob"}).render(spec).objects] == ["MPIJob"]
    with pytest.raises(UsageError, match=r"option compute_domain: 'maybe': give auto, true or false"):
        KubernetesEngine({"compute_domain": "maybe"})


def test_the_schema_refuses_what_the_driver_refuses():
    """The written-out CRD schema is a schema (jsonschema checks it) and judges: no channel, an allocation mode the
    driver lacks, a negative numNodes, a claim template without a name."""
    schema = crds.crd_schema(crds.COMPUTE_DOMAIN)
    jsonschema.validators.validator_for(schema).check_schema(schema)
    good = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": {"name": "d"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"}}}
    jsonschema.validate(good, schema)
    for bad in ({"numNodes": 2}, {**good["spec"], "numNodes": -1},
                {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Some"}},
                {"channel": {"resourceClaimTemplate": {}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, "spec": bad}, schema)


def test_the_dry_run_shows_it():
    """`gpuval submit ... --profile --dry-run` with no cluster to ask: the ComputeDomain is shown, and a note says
    what could not be asked."""
    proc = run_gpuval("submit", "nccl", "--on", "kubernetes", "--nodes", "2", "--gpus-per-node", "4", "--profile",
                      PROFILE, "--opt", "kind=MPIJob", "--dry-run", env={"KUBECONFIG": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert "kind: ComputeDomain\n" in proc.stdout and "resourceClaimTemplateName: gpuval-nccl-" in proc.stdout
    assert "note: compute_domain: could not ask a cluster whether it serves ComputeDomains" in proc.stderr


def _cluster(server, domains: bool = True) -> None:
    _declare(server)
    if domains:
        server.resources[CD] = {"kind": "ComputeDomain", "namespaced": True}


@pytest.mark.asyncio
async def test_submit_makes_it_first_owned_by_the_job_and_cancel_deletes_it(kmock):
    """Created before the job (its controller makes the claim template the pods name), labelled as gpuval's, then
    owned by the MPIJob (the garbage collector deletes it with the job however the job goes); cancel deletes it."""
    _cluster(kmock)
    engine = KubernetesEngine({"namespace": "gpu"}, api_client=_api(kmock))
    job_id = await asyncio.to_thread(engine.submit, _tray_spec())
    name = job_id.split("/")[2]
    posts = [r.url.path for r in kmock if r.method == "POST"]
    assert posts == ["/apis/resource.nvidia.com/v1beta1/namespaces/gpu/computedomains",
                     "/apis/kubeflow.org/v2beta1/namespaces/gpu/mpijobs"]
    job = kmock.objects["kubeflow.org/v2beta1/mpijobs", "gpu", name]
    domain = kmock.objects[CD, "gpu", f"{name}-compute-domain"]
    assert domain["metadata"]["labels"] == {"gpuval.io/job": name}
    assert domain["metadata"]["ownerReferences"] == [{
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": name, "uid": job["metadata"]["uid"],
        "controller": False, "blockOwnerDeletion": False}]
    await asyncio.to_thread(engine.cancel, job_id)
    assert kmock.objects[CD, "gpu", f"{name}-compute-domain"].deleted


@pytest.mark.asyncio
async def test_cancel_leaves_a_compute_domain_gpuval_did_not_make(kmock):
    """A ComputeDomain of the job's name made by someone else (no gpuval label) stays, and is named."""
    _cluster(kmock)
    engine = KubernetesEngine({"namespace": "gpu", "compute_domain": "false"}, api_client=_api(kmock))
    job_id = await asyncio.to_thread(engine.submit, _tray_spec())
    name = job_id.split("/")[2]
    await asyncio.to_thread(client.CustomObjectsApi(_api(kmock)).create_namespaced_custom_object, "resource.nvidia.com",
                            "v1beta1", "gpu", "computedomains", {
                                "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                                "metadata": {"name": f"{name}-compute-domain", "namespace": "gpu"},
                                "spec": {"channel": {"resourceClaimTemplate": {"name": "theirs"}}}})
    with pytest.raises(EngineError, match=f"cancelled; left ComputeDomain {name}-compute-domain as it is"):
        await asyncio.to_thread(engine.cancel, job_id)
    assert not kmock.objects[CD, "gpu", f"{name}-compute-domain"].deleted


@pytest.mark.asyncio
async def test_a_cluster_without_the_dra_driver(kmock):
    """compute_domain=true where the cluster serves no ComputeDomain: one line, nothing sent. auto: the job goes
    without one (its IMEX, if any, is the hosts' own)."""
    _cluster(kmock, domains=False)
    asked = KubernetesEngine({"namespace": "gpu", "compute_domain": "true"}, api_client=_api(kmock))
    with pytest.raises(EngineError, match=r"compute_domain=true: the cluster serves no ComputeDomain "
                                          r"\(resource.nvidia.com/v1beta1\): install NVIDIA's DRA driver"):
        await asyncio.to_thread(asked.submit, _tray_spec())
    assert not [r for r in kmock if r.method == "POST"]
    auto = KubernetesEngine({"namespace": "gpu"}, api_client=_api(kmock))
    await asyncio.to_thread(auto.submit, _tray_spec())
    assert [r.url.path for r in kmock if r.method == "POST"] == ["/apis/kubeflow.org/v2beta1/namespaces/gpu/mpijobs"]
