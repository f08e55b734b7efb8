"""The lammps and train workloads' renders, checked by the engines' own authorities where no engine can run here:
Azure ML job YAML loaded back with azure-ai-ml's `load_job` (documents 000 and 004), Kubeflow MPIJob and
PyTorchJob against the real CRD schemas (jsonschema on openAPIV3Schema), sbatch scripts by their lines; and bad
workload arguments as one-line errors (exit 2)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from azure.ai.ml import load_job

from gpuval.errors import UsageError
from gpuval.node.unshadowed import UNSHADOW
from gpuval.workloads.base import WorkloadRequest, get_workload
from tests.conftest import run_gpuval
from tests.engines import crds

IMAGE = "jzacr3.azurecr.io/pytorch_nccl_tests_2303:latest"
NDV4 = ["--nodes", "2", "--gpus-per-node", "8", "--sku", "Standard_ND96asr_v4", "--image", IMAGE]
JOB_PYTHON = f"/opt/venv/bin/python -c {shlex.quote(UNSHADOW)}"  # --opt python=: the job's interpreter, run unshadowed


def _render(tmp_path: Path, *args: str) -> Path:
    proc = run_gpuval("submit", "--dry-run", "--output", str(tmp_path), *args)
    assert proc.returncode == 0, proc.stderr
    return tmp_path


def test_lammps_azureml_job_is_document_000s(tmp_path):
    """2 x ND96asr_v4, MpiDistribution with 8 processes per instance, one rank per GPU on the GPU package."""
    job = load_job(_render(tmp_path, "lammps", "--on", "azureml", *NDV4) / "job.yml")
    assert job.distribution.type == "mpi" and job.distribution.process_count_per_instance == 8
    assert job.resources.instance_count == 2
    assert job.command == "gpuval lammps --benchmark lj --scale 1x1x1 --accel gpu --gpus 8 --json"
    assert job.environment_variables["NCCL_TOPO_FILE"] == "/opt/microsoft/ndv4-topo.xml"


def test_train_azureml_on_attached_aks_is_document_004s(tmp_path):
    """PyTorch distribution on an attached Kubernetes compute with its instance type, shm for the data loader."""
    job = load_job(_render(tmp_path, "train", "--on", "azureml", *NDV4, "--shm-size", "64g", "--opt",
                           "compute=aks-h100", "--opt", "instance_type=gpu8", "--", "--steps", "50") / "job.yml")
    assert job.distribution.type == "pytorch" and job.distribution.process_count_per_instance == 8
    assert job.resources.instance_count == 2 and job.resources.instance_type == "gpu8"
    assert job.compute.endswith("aks-h100") and job.resources.shm_size == "64g"
    assert job.command == ("gpuval train --steps 50 --batch-size 32 --image-size 32 --backend auto --step-report 10 "
                           "--results /dev/stdout")


def test_lammps_mpijob_validates_against_the_crd(tmp_path):
    out = _render(tmp_path, "lammps", "--on", "kubernetes", *NDV4, "--", "--accel", "kokkos", "--scale", "8")
    [obj] = [yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")]
    assert obj["kind"] == "MPIJob"
    crds.validate(obj, crds.MPIJOB)
    assert obj["spec"]["slotsPerWorker"] == 8 and obj["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    launch = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert launch[:3] == ["mpirun", "-np", "16"]
    assert launch[launch.index("gpuval"):] == ["gpuval", "lammps", "--benchmark", "lj", "--scale", "2x2x2",
                                               "--accel", "kokkos", "--gpus", "8", "--json"]


def test_train_pytorchjob_validates_against_the_crd(tmp_path):
    out = _render(tmp_path, "train", "--on", "kubernetes", *NDV4)
    [obj] = [yaml.safe_load(p.read_text()) for p in out.glob("*.yaml")]
    assert obj["kind"] == "PyTorchJob"
    crds.validate(obj, crds.PYTORCHJOB)
    replicas = obj["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 1
    assert obj["spec"]["nprocPerNode"] == "8"
    command = replicas["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["torchrun", "--nproc-per-node=8"] and command[3:5] == ["gpuval", "train"]
    limits = replicas["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"  # quantities are strings: the kubernetes client requires them


def test_sbatch_scripts(tmp_path):
    lammps = (_render(tmp_path / "l", "lammps", "--on", "slurm", "--nodes", "2", "--gpus-per-node", "8",
                      "--opt", "python=/opt/venv/bin/python") / "job.sbatch").read_text().splitlines()
    assert "#SBATCH --nodes=2" in lammps and "#SBATCH --ntasks-per-node=8" in lammps
    assert "#SBATCH --gpus-per-node=8" in lammps
    assert lammps[-1].startswith("srun --mpi=pmix ")
    # another interpreter than this one (its version unknown here): run unshadowed by the job's folder
    assert lammps[-1].endswith(f"{JOB_PYTHON} gpuval lammps --benchmark lj --scale 1x1x1 --accel gpu --gpus 8 --json")
    train = (_render(tmp_path / "t", "train", "--on", "slurm", "--nodes", "2", "--gpus-per-node", "8",
                     "--opt", "python=/opt/venv/bin/python") / "job.sbatch").read_text().splitlines()
    assert "#SBATCH --ntasks-per-node=8" in train
    assert any(line.startswith("export MASTER_PORT=") for line in train)
    # one torchrun per node (8 ranks each), from the job's interpreter, meeting at the first node
    assert train[-1].startswith('srun --ntasks-per-node=1 --mpi=none "--ntasks=$SLURM_JOB_NUM_NODES" '
                                f'"--cpus-per-task=$SLURM_CPUS_ON_NODE" {JOB_PYTHON} torch.distributed.run '
                                '--nproc-per-node=8 "--nnodes=$SLURM_JOB_NUM_NODES" "--node-rank=$SLURM_NODEID"')
    assert '"--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT"' in train[-1]
    assert train[-1].endswith(f"--no-python {JOB_PYTHON} gpuval train --steps 30 --batch-size 32 "
                              "--image-size 32 --backend auto --step-report 10 --results /dev/stdout")


@pytest.mark.parametrize("workload,args,gpus,message", [
    ("lammps", ["--accel", "gpu"], 0, "--accel gpu runs one MPI rank per GPU: give --gpus-per-node"),
    ("lammps", ["--benchmark", "rhodo"], 0, "rhodo"),
    ("lammps", ["--scale", "two"], 0, "--scale"),
    ("lammps", ["--ranks", "2"], 8, "lammps workload arguments: unrecognized arguments: --ranks 2"),
    ("train", ["--steps", "1"], 0, "train workload arguments: --steps: Input should be greater than or equal to 2"),
    ("train", ["--backend", "mpi"], 8, "train workload arguments: argument --backend: invalid choice: 'mpi'"),
    ("train", ["--steps", "ten"], 0, "argument --steps: invalid int value: 'ten'"),
])
def test_bad_workload_arguments_are_usage_errors(workload, args, gpus, message):
    req = WorkloadRequest(workload=workload, gpus_per_node=gpus, args=args)
    with pytest.raises(UsageError, match=re.escape(message)):
        get_workload(workload).build(req)


def test_bad_arguments_on_the_command_line_are_one_line_and_exit_2():
    proc = run_gpuval("submit", "lammps", "--on", "slurm", "--dry-run", "--use", "x")
    assert proc.returncode == 2 and "the lammps workload has no --use variants" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("node_args", [["--drain", "--node", "n1"], ["--node=n1"]])
def test_one_node_named_for_a_job_of_several_is_refused(node_args):
    """`--node` names the one node a health run acts on: on a job of four nodes every node would drain n1."""
    proc = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "4", "--dry-run", "--", *node_args)
    assert proc.returncode == 2 and "--node names one node, and this job runs on 4 nodes" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    alone = run_gpuval("submit", "health", "--on", "slurm", "--nodes", "1", "--dry-run", "--", *node_args)
    assert alone.returncode == 0 and "--node" in alone.stdout
