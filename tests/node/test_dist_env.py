"""Rank and rendezvous from each engine's variables (../shared/notes/reference.md, "What each engine hands a job").
The variable sets are those the engines document; the real launchers (torchrun, mpirun, srun) are exercised in
tests/test_bench_runs.py and the engine tests."""

from __future__ import annotations

import pytest

from gpuval.errors import UsageError
from gpuval.node.dist_env import detect, first_host


def test_no_launcher():
    assert detect({"HOME": "/root"}) is None


def test_torchrun():
    env = detect({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "0",
                  "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "x"})
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 8, 3, 4)
    assert env.launcher == "torchrun" and env.init_method == "env://"


def test_azureml_pytorch_distribution():
    env = detect({"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4",
                  "MASTER_PORT": "6105"})
    assert (env.rank, env.node_rank, env.local_rank) == (9, 1, 1)


def test_kubeflow_pytorchjob():
    env = detect({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456",
                  "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1"})
    assert env.launcher == "kubeflow" and env.local_world_size == 1 and env.node_rank == 1


def test_azureml_mpi_distribution():
    """Azure ML MPI jobs: Open MPI's variables plus AZ_BATCH_MASTER_NODE=addr:port."""
    env = detect({"OMPI_COMM_WORLD_RANK": "12", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "4",
                  "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "AZ_BATCH_MASTER_NODE": "10.0.0.5:6105"})
    assert (env.rank, env.world_size, env.local_rank, env.node_rank) == (12, 16, 4, 1)
    assert env.init_method.startswith("tcp://10.0.0.5:")


def test_mpirun_single_node_uses_loopback_and_a_shared_port():
    base = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-vm-1234@1"}
    a = detect({**base, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    b = detect({**base, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert a.master_addr == "127.0.0.1" and a.master_port == b.master_port


def test_mpirun_across_nodes_needs_master_addr():
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"})


def test_srun_step():
    env = detect({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NUM_NODES": "2", "SLURM_LOCALID": "1",
                  "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu-[03-04]", "SLURM_JOB_ID": "77"})
    assert (env.rank, env.world_size, env.local_world_size, env.node_rank) == (5, 8, 4, 1)
    assert env.master_addr == "gpu-03" and env.launcher == "srun"


def test_sbatch_batch_step_is_not_a_rank():
    assert detect({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "8", "SLURM_PROCID": "0"}) is None


@pytest.mark.parametrize(("nodelist", "host"), [("n1", "n1"), ("gpu-[03-05,9]", "gpu-03"), ("a[1,2],b3", "a1"),
                                                 ("ndv4-hpc-pg0-[1-2]", "ndv4-hpc-pg0-1")])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


def test_bad_integer_is_a_usage_error():
    with pytest.raises(UsageError, match="WORLD_SIZE"):
        detect({"RANK": "0", "WORLD_SIZE": "eight"})
