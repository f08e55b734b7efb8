"""A planner's Round as engine jobs, rendered (pure): the node tests of a round as one job pinned to all of their
nodes, each pair or group test as its own job pinned to its nodes; the Slurm script by its lines, the Kubernetes
manifests against the core schemas (kubernetes-validate) and the Kubeflow PyTorchJob CRD schema (jsonschema on
openAPIV3Schema); Azure ML refused with what to run instead. The command line's checks are in tests/cli/test_fleet.py."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuval.engines import get_engine
from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.slurm import SlurmEngine
from gpuval.errors import UsageError
from gpuval.fleet.plan.expect import TestSizes
from gpuval.fleet.run.worker_request import NodeTestRequest, RankTestRequest
from gpuval.fleet.run.job import JobSettings, round_jobs
from gpuval.fleet.plan.terms import Round, Test
from gpuval.engines.azureml import AZUREML_REFUSAL
from tests.conftest import DATA

SETTINGS = JobSettings(run_id="20260101T000000Z-abcdef", sizes=TestSizes(8 * 1024**3, 16 * 1024**3), iters=10,
                       timeout_s=600, gpus_per_node=8, sku="Standard_ND96asr_v4", image="img:1")
ROUND = Round(3, (Test("r3-rerun-0", "node", ("gpu-07",), 32, "rerun"), Test("r3-rerun-1", "node", ("gpu-12",), 32,
                                                                            "rerun"),
                  Test("r3-retest-2", "pair", ("gpu-01", "gpu-09"), 32, "retest"),
                  Test("r3-bisect-3", "group", ("gpu-02", "gpu-03", "gpu-04"), 32, "bisect")))


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_round_on_slurm():
    jobs = round_jobs(ROUND, SETTINGS, SlurmEngine({"python": "/usr/bin/python3"}).site())
    assert [j.spec.name for j in jobs] == ["gpuval-fleet-r3-nodes", "gpuval-fleet-r3-retest-2",
                                           "gpuval-fleet-r3-bisect-3"]
    nodes, pair, group = (SlurmEngine().render(j.spec).files["job.sbatch"] for j in jobs)
    assert "#SBATCH '--nodelist=gpu-[07,12]'" in nodes and "#SBATCH --nodes=2" in nodes
    assert "#SBATCH --ntasks-per-node=1" in nodes and "#SBATCH --exclusive" in nodes
    assert "--kill-on-bad-exit" not in nodes  # each node test is its own: one failing ends no other
    assert "gpuval fleet node-test --round 3 --samples 32 --size 8589934592" in nodes
    assert "#SBATCH '--nodelist=gpu-[01,09]'" in pair and "#SBATCH --ntasks-per-node=8" in pair
    assert "srun --kill-on-bad-exit=1" in pair
    assert "--test r3-retest-2 --collectives all_reduce --collectives sendrecv" in pair
    assert "--size 17179869184" in pair and "#SBATCH --time=15" in pair  # the test timeout + start-up
    assert "#SBATCH '--nodelist=gpu-[02-04]'" in group and "--collectives all_reduce\n" in group
    assert "export GPUVAL_RUN_ID=20260101T000000Z-abcdef" in pair and "export GPUVAL_DB=none" in pair
    assert "export NCCL_TOPO_FILE=" in pair  # the SKU's network preset


def test_a_round_on_kubernetes_passes_the_schemas():
    site = KubernetesEngine({"namespace": "gpu"}).site()
    jobs = round_jobs(ROUND, SETTINGS, site)
    rendered = [site.engine.render(j.spec) for j in jobs]
    service, indexed = rendered[0].objects
    assert indexed["kind"] == "Job" and indexed["spec"]["completions"] == 2
    # each node test is its own: a failed pod fails its index only, never the others' (backoffLimit 0 would)
    assert indexed["spec"]["backoffLimitPerIndex"] == 0 and "backoffLimit" not in indexed["spec"]
    pod = indexed["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                     for node in ("gpu-07", "gpu-12")]  # one value per node field selector, as the API server takes
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert {"name": "GPUVAL_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in \
        pod["containers"][0]["env"]
    for obj in (service, indexed):
        kubernetes_validate.validate(obj, "1.30", strict=True)
    crd = yaml.safe_load((DATA / "k8s-crds" / "kubeflow.org_pytorchjobs.yaml").read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["served"] and v["storage"])["schema"]["openAPIV3Schema"]
    for r in rendered[1:]:
        [job] = r.objects
        assert job["kind"] == "PyTorchJob"
        jsonschema.validate(job, schema)
        replicas = job["spec"]["pytorchReplicaSpecs"]
        assert 1 + replicas.get("Worker", {}).get("replicas", 0) == len(r.spec.extras["kubernetes"]["nodes"])
        argv = replicas["Master"]["template"]["spec"]["containers"][0]["command"]
        assert argv[:2] == ["torchrun", "--nproc-per-node=8"] and _arg(argv, "--round") == "3"


def test_azureml_cannot_place_tests_on_named_nodes():
    with pytest.raises(UsageError) as refused:
        get_engine("azureml").site()
    assert str(refused.value) == AZUREML_REFUSAL and "--on kubernetes" in AZUREML_REFUSAL


def test_the_workers_request_is_its_command_line_read_back_and_nothing_else():
    """A test job's worker arguments are one model (worker_request.py): what the job writes (`argv`, the command
    line above) is what the worker parses, and a mangled command line is a one-line error, never a test run on
    made-up settings."""
    [nodes, pair, _group] = round_jobs(ROUND, SETTINGS, SlurmEngine({"python": "/usr/bin/python3"}).site())
    node_args = nodes.spec.command[nodes.spec.command.index("node-test") + 1:]
    node = NodeTestRequest.parse(node_args)
    assert (node.round, node.samples, node.size, node.run_id) == (3, 32, 8 << 30, SETTINGS.run_id)
    assert node.argv() == node_args
    rank = RankTestRequest.parse(pair.spec.command[pair.spec.command.index("rank-test") + 1:])
    assert (rank.test, rank.collectives, rank.size) == ("r3-retest-2", ("all_reduce", "sendrecv"), 16 << 30)
    for bad, message in ((["--round", "3", "--rounds", "4"], "'--rounds': not a flag"),
                         ([*node_args, "--round", "4"], "--round given twice"),
                         ([*node_args[:-1]], "no value after it"),
                         ([*node_args, "--timeout", "nan"], "timeout"),
                         ([a.replace(SETTINGS.run_id, "x;rm -rf /") for a in node_args], "run_id: ")):
        with pytest.raises(UsageError, match=message):
            NodeTestRequest.parse(bad)
