"""Pure renders: every engine's files against recorded golden files, byte for byte (as submitit does: the Slurm
script, the local job.sh, the MPIJob, PyTorchJob and indexed Job + Service manifests, the Azure ML job.yml, with
the paths that depend on the machine given explicitly), Kubernetes manifests against the real Kubeflow CRD schemas
(jsonschema on openAPIV3Schema) and the core schemas (kubernetes-validate), and the local script.

A deliberate change to a render: rewrite the goldens with GPUVAL_WRITE_GOLDEN=1, then read the diff."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from unittest import mock

import jsonschema
import kubernetes_validate
import pytest

from gpuval.engines.azureml import AzureMLEngine
from gpuval.engines.kubernetes import KubernetesEngine
from gpuval.engines.local import LocalEngine
from gpuval.engines.slurm import SlurmEngine
from gpuval.engines.spec import Launcher
from gpuval.node.cpus import parse_hex_mask
from gpuval.node.recorded import RecordedMachine
from gpuval.node.unshadowed import UNSHADOW
from tests.conftest import run_gpuval
from tests.engines import crds
from tests.engines.specs import nccl_spec

GOLDEN = Path(__file__).parent / "golden"
CRDS = {"MPIJob": crds.MPIJOB, "PyTorchJob": crds.PYTORCHJOB}


def _golden(name: str, text: str) -> str:
    """The golden file's text (written from `text` first when GPUVAL_WRITE_GOLDEN=1)."""
    path = GOLDEN / name
    if os.environ.get("GPUVAL_WRITE_GOLDEN") == "1":
        path.write_text(text)
    return path.read_text()


def test_slurm_script_matches_golden():
    spec = nccl_spec(cpus_per_proc=12, time_limit_min=30,
                     extras={"slurm": {"partition": "hpc", "exclusive": True, "workdir": "/shared/gpuval",
                                       "source": "/shared/src/gpuval"}})
    text = SlurmEngine({"python": "/usr/bin/python3"}).render(spec).files["job.sbatch"]
    assert text == (GOLDEN / "ndv4-nccl.sbatch").read_text()


def test_local_script_matches_golden():
    """Not root, so no --allow-run-as-root (what `os.geteuid() == 0` adds on this test machine)."""
    spec = nccl_spec(image=None, sku=None, nodes=1, gpus_per_node=0, procs_per_node=2)
    with mock.patch("gpuval.engines.local.os.geteuid", return_value=1000):
        rendered = LocalEngine({"python": "/usr/bin/python3", "oversubscribe": False}).render(spec)
    assert list(rendered.files) == ["job.sh"]
    assert rendered.text() == _golden("local-nccl.sh", rendered.text())


@pytest.mark.parametrize("launcher,golden", [(Launcher.MPI, "ndv4-nccl.mpijob.yaml"),
                                             (Launcher.TORCHRUN, "ndv4-nccl.pytorchjob.yaml")])
def test_kubeflow_manifests_match_golden(launcher, golden):
    rendered = KubernetesEngine({"namespace": "gpu"}).render(nccl_spec(launcher=launcher, shm_size="64g"))
    assert rendered.text() == _golden(golden, rendered.text())


def test_indexed_job_and_service_match_golden(monkeypatch: pytest.MonkeyPatch):
    """kind Job: the job's own topology ConfigMap, the headless Service and the indexed Job, one file each. The
    topology file is named relative to the golden folder: the job's name hashes the options, and an absolute path
    would tie the golden to where the repository is checked out."""
    monkeypatch.chdir(GOLDEN)
    options = {"namespace": "gpu", "kind": "Job", "rdma_resource": "rdma/shared_ib", "topology_source": "ndv4-topo.xml"}
    rendered = KubernetesEngine(options).render(nccl_spec(launcher=Launcher.TORCHRUN, time_limit_min=30))
    assert list(rendered.files) == ["configmap-gpuval-nccl.yaml", "service-gpuval-nccl.yaml", "job-gpuval-nccl.yaml"]
    assert rendered.text() == _golden("ndv4-nccl.indexed-job.yaml", rendered.text())


def test_azureml_job_matches_golden():
    """With --image (the curated environment's job names this checkout's path as its code)."""
    rendered = AzureMLEngine({"compute": "NDv4"}).render(nccl_spec(shm_size="64g", time_limit_min=30))
    assert rendered.text() == _golden("ndv4-nccl.job.yml", rendered.text())


def test_slurm_container_installs_gpuval_once_per_node():
    """In an image without gpuval, the warm-up step installs it from the mounted checkout (or PyPI without one);
    nccl-tests' binaries need no install."""
    spec = nccl_spec(extras={"slurm": {"source": "/shared/src/gpuval"}})
    text = SlurmEngine({}).render(spec).files["job.sbatch"]
    warm, main = [line for line in text.splitlines() if line.startswith("srun")]
    assert "/shared/src/gpuval:/opt/gpuval-src" in warm and "pip install --quiet /opt/gpuval-src" in warm
    assert "--container-name=" in main and "--container-image" not in main
    pypi = SlurmEngine({"source": ""}).render(nccl_spec()).files["job.sbatch"]
    assert "pip install --quiet gpuval==" in pypi
    tests = nccl_spec(use="nccl-tests")
    assert "pip install" not in SlurmEngine({}).render(tests).files["job.sbatch"]


def test_slurm_without_image_runs_the_submitting_interpreter():
    spec = nccl_spec(image=None, sku=None, gpus_per_node=0, procs_per_node=2, nodes=1)
    text = SlurmEngine({"python": "/opt/venv/bin/python", "workdir": "/w"}).render(spec).text()
    # not this interpreter, so its version is not known here: the start that drops the working folder (any Python 3)
    unshadowed = f"/opt/venv/bin/python -c {shlex.quote(UNSHADOW)} gpuval"
    assert f"srun --mpi=none --cpu-bind=cores {unshadowed} bench all_reduce" in text
    assert "container" not in text


@pytest.mark.parametrize("workload,args,opts,plugin", [
    ("nccl", [], [], "none"),                       # gpuval bench's torch ranks read srun's environment: no PMI
    ("health", [], [], "none"),
    ("burn", [], [], "none"),
    ("train", [], [], "none"),                      # the torchrun step, one per node
    ("nccl", ["--use", "nccl-tests"], [], "pmix"),  # an MPI program: its ranks come from PMIx
    ("lammps", [], [], "pmix"),
    ("nccl", [], ["--opt", "mpi=pmi2"], "pmi2"),    # the user's plugin over the workload's
    ("lammps", [], ["--opt", "mpi=none"], "none"),
])
def test_slurm_asks_for_an_mpi_plugin_only_for_mpi_programs(workload, args, opts, plugin):
    """Every srun step names its plugin: left out, the cluster's MpiDefault applies, and where that plugin cannot
    load (srun's "Invalid MPI type 'pmix'") a job that needs no PMI fails with it."""
    proc = run_gpuval("submit", workload, "--on", "slurm", "--dry-run", *args, *opts)
    assert proc.returncode == 0, proc.stderr
    steps = [line for line in proc.stdout.splitlines() if line.startswith("srun ")]
    assert steps and all(f" --mpi={plugin} " in step for step in steps), steps


@pytest.mark.parametrize("launcher,kind", [(Launcher.MPI, "MPIJob"), (Launcher.TORCHRUN, "PyTorchJob")])
def test_kubeflow_manifests_validate_against_the_crds(launcher, kind):
    spec = nccl_spec(launcher=launcher, shm_size="64g")
    rendered = KubernetesEngine({"namespace": "gpu"}).render(spec)
    [obj] = rendered.objects
    assert obj["kind"] == kind
    crds.validate(obj, CRDS[kind])
    pod = (obj["spec"].get("mpiReplicaSpecs") or obj["spec"]["pytorchReplicaSpecs"])
    worker = pod["Worker"]["template"]["spec"]
    limits = worker["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "rdma/ib": "8"}
    assert worker["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in worker["volumes"]
    assert {"name": "nccl-topology", "configMap": {"name": "nccl-topology"}} in worker["volumes"]
    assert worker["nodeSelector"] == {"node.kubernetes.io/instance-type": "Standard_ND96asr_v4"}


def test_mpijob_for_a_non_root_image_validates():
    """The MPI Operator's pi example runs as mpiuser: sshd reads its own config, the keys go to its home."""
    options = {"sshd_config": "/home/mpiuser/.sshd_config", "ssh_auth_mount_path": "/home/mpiuser/.ssh"}
    [obj] = KubernetesEngine(options).render(nccl_spec()).objects
    crds.validate(obj, crds.MPIJOB)
    assert obj["spec"]["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["command"] == ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]


def test_a_crd_violation_is_caught():
    obj = KubernetesEngine().render(nccl_spec()).objects[0]
    obj["spec"]["slotsPerWorker"] = "eight"
    with pytest.raises(jsonschema.ValidationError):
        crds.validate(obj, crds.MPIJOB)


def test_indexed_job_and_core_kinds_validate(tmp_path):
    topo = tmp_path / "ndv4-topo.xml"
    topo.write_text("<system version='1'/>\n")
    spec = nccl_spec(launcher=Launcher.TORCHRUN)
    rendered = KubernetesEngine({"kind": "Job", "rdma_resource": "rdma/shared_ib",
                                 "topology_source": str(topo)}).render(spec)
    kinds = [o["kind"] for o in rendered.objects]
    assert kinds == ["ConfigMap", "Service", "Job"]
    # The job's objects carry its unique name (the spec's name and a hash, chosen in render), the ConfigMap too.
    assert rendered.objects[0]["metadata"]["name"] == f"{rendered.job_name}-nccl-topology"
    assert rendered.job_name.startswith(f"{spec.name}-")
    for obj in rendered.objects:
        kubernetes_validate.validate(obj, "1.30", strict=True)
    job = rendered.objects[-1]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["rdma/shared_ib"] == "1"
    assert "--node-rank=$(JOB_COMPLETION_INDEX)" in container["command"]


def test_cli_writes_manifests(tmp_path):
    proc = run_gpuval("submit", "nccl", "--on", "kubernetes", "--nodes", "2", "--gpus-per-node", "8", "--sku",
                      "Standard_ND96asr_v4", "--image", "img:1", "--dry-run", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.glob("*.yaml")] == ["mpijob-gpuval-nccl.yaml"]
    assert proc.stdout.startswith("apiVersion: kubeflow.org/v2beta1")


def test_local_script_under_mpirun():
    spec = nccl_spec(image=None, sku=None, nodes=1, gpus_per_node=0, procs_per_node=2)
    text = LocalEngine({"python": "/usr/bin/python3", "oversubscribe": False}).render(spec).text()
    # CPU ranks sweep to 64M, not a GPU's 8G
    assert "mpirun -np 2" in text and f"/usr/bin/python3 -c {shlex.quote(UNSHADOW)} gpuval bench all_reduce -b 8 -e " \
        "64M -f 2" in text


def test_bad_input_is_one_line_and_exit_2():
    proc = run_gpuval("submit", "nccl", "--on", "local", "--nodes", "2", "--dry-run")
    assert proc.returncode == 2 and "--nodes must be 1" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--sku", "Standard_X", "--dry-run")
    assert proc.returncode == 2 and "no network preset" in proc.stderr
    proc = run_gpuval("submit", "nccl", "--on", "slurm", "--dry-run", "--", "all_reduce", "-b", "1G", "-e", "1K")
    assert proc.returncode == 2 and "above maximum" in proc.stderr


def _masks(spec) -> list[set[int]]:
    text = SlurmEngine({"workdir": "/w"}).render(spec).text()
    bind = next(w for w in text.split() if w.startswith("--cpu-bind="))
    return [set(parse_hex_mask(m)) for m in bind.removeprefix("--cpu-bind=mask_cpu:").split(",")]


def test_slurm_masks_follow_the_pinning_plan_and_the_visible_gpu_order():
    """Rank r drives GPU CUDA_VISIBLE_DEVICES[r]: its cores are a private share of that GPU's NUMA node."""
    machine = RecordedMachine.load("Standard_ND96asr_v4")
    numa_of_gpu = {g.index: g.numa_node for g in machine.gpu_inventory().gpus}
    cpus_of = {n.id: set(n.cpus) for n in machine.numa_nodes()}
    for order in ("2,1,7,5,3,0,6,4", "0,1,2,3,4,5,6,7"):
        masks = _masks(nccl_spec(env={"CUDA_VISIBLE_DEVICES": order}))
        gpus = [int(g) for g in order.split(",")]
        assert len(masks) == 8 and all(len(m) == 12 for m in masks)
        assert all(m <= cpus_of[numa_of_gpu[g]] for m, g in zip(masks, gpus))
        assert len(set().union(*masks)) == 96  # no two ranks share a core
    assert "--cpu-bind=cores" in SlurmEngine({"workdir": "/w"}).render(nccl_spec(procs_per_node=1)).text()
    h100 = _masks(nccl_spec(sku="Standard_ND96isr_H100_v5"))
    assert [len(m) for m in h100] == [len(h100[0])] * 8


def test_mpirun_maps_the_jobs_own_ranks_per_node():
    spec = nccl_spec(procs_per_node=4, gpus_per_node=4, launcher=Launcher.MPI)
    text = KubernetesEngine().render(spec).text()
    assert "ppr:4:node" in text and "{procs_per_node}" not in text
