"""`gpuval pin`: plans per launcher, and `pin check` on real processes started here with a known affinity."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuval.node.machine import NumaNode
from gpuval.node.pinning import LOCAL_RANK_VARS, check_processes, plan_bindings, read_process, render
from tests.conftest import run_gpuval


@pytest.fixture
def sleepers():
    """Real processes, each pinned with os.sched_setaffinity and started with a given environment; stopped by the
    PIDs started here."""
    started = []
    # only the variables a test gives say which rank/GPU a process is, even when pytest itself runs under a launcher
    inherited = {k: v for k, v in os.environ.items() if k not in (*LOCAL_RANK_VARS, "CUDA_VISIBLE_DEVICES")}

    def start(cpus: set[int], env: dict[str, str] | None = None) -> int:
        # the process pins itself before it starts its thread, so every thread inherits the affinity
        proc = subprocess.Popen([sys.executable, "-c", f"import os, time, threading; os.sched_setaffinity(0, {cpus!r});"
                                 "threading.Thread(target=time.sleep, args=(60,)).start(); print('ready', flush=True);"
                                 "time.sleep(60)"],
                                env={**inherited, **(env or {})}, stdout=subprocess.PIPE, text=True)
        # wait until it runs: right after a vfork+exec the kernel may not have set up /proc/PID/environ yet
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started.append(proc)
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_read_process_sees_every_thread_affinity(sleepers):
    pid = sleepers({0}, env={"LOCAL_RANK": "3"})
    found = read_process(pid, gpus=8)
    assert found.cpus == [0] and found.local_rank == 3 and found.gpu == 3
    assert found.threads and found.threads[0].tid == pid


@pytest.mark.parametrize("env, rank, gpu", [
    ({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "6,7,4,5"}, 1, 7),  # torchrun on a reordered GPU list
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, 2, 2),  # mpirun, every GPU visible
    ({"SLURM_LOCALID": "5", "CUDA_VISIBLE_DEVICES": "5"}, 5, 5),  # srun --gpus-per-task: one GPU per task
    ({"MPI_LOCALRANKID": "0", "CUDA_VISIBLE_DEVICES": "3,2"}, 0, 3),  # Intel MPI / MPICH
    ({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"}, 1, None),  # UUIDs: the GPU cannot be told
    ({}, None, None),  # not a launched rank: no GPU guessed
])
def test_pin_check_finds_each_rank_gpu_from_its_own_environment(sleepers, env, rank, gpu):
    """Real processes started with a launcher's variables; the environment is read from /proc/PID/environ."""
    pid = sleepers({0}, env=env)
    found = read_process(pid, gpus=8)
    assert (found.local_rank, found.gpu) == (rank, gpu)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_ranks_pinned_next_to_their_gpus_get_no_numa_warning(sleepers):
    """Each rank pinned to its own GPU's NUMA node: no false 'wrong NUMA node' (the old /dev/nvidiaN reading gave
    every CUDA process GPU 0, since CUDA opens every visible device node); a rank on the other node is named."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    numa = [NumaNode(0, [cpus[0]]), NumaNode(1, [cpus[1]])]
    gpu_numa = [0, 0, 1, 1]
    good = [sleepers({cpus[0]}, env={"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "1,3"}),
            sleepers({cpus[1]}, env={"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "1,3"})]
    procs = [read_process(pid, gpus=len(gpu_numa)) for pid in good]
    check_processes(procs, numa, gpu_numa)
    assert [p.gpu for p in procs] == [1, 3] and not any(p.warnings for p in procs)
    wrong = read_process(sleepers({cpus[0]}, env={"SLURM_LOCALID": "0", "CUDA_VISIBLE_DEVICES": "2"}), gpus=4)
    check_processes([wrong], numa, gpu_numa)
    assert wrong.warnings == [f"uses GPU 2 on NUMA node 1 but may run on NUMA node(s) [0] (CPUs {cpus[0]})"]


def test_pin_check_cli_warns_on_shared_cores(sleepers):
    cpus = sorted(os.sched_getaffinity(0))
    a, b = sleepers({cpus[0]}), sleepers({cpus[0]})
    proc = run_gpuval("pin", "check", str(a), str(b), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows[0]["cpus"] == str(cpus[0])
    assert any(f"shares CPUs {cpus[0]} with pid {b}" in w for w in rows[0]["warnings"])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pin_check_cli_clean_when_ranks_have_their_own_cores(sleepers):
    cpus = sorted(os.sched_getaffinity(0))
    a, b = sleepers({cpus[0]}), sleepers({cpus[1]})
    proc = run_gpuval("pin", "check", str(a), str(b))
    assert proc.returncode == 0 and "no pinning problem found" in proc.stdout


def test_wrong_numa_node_for_the_gpu_against_the_a100_layout(sleepers):
    """Real process affinity, judged against the recorded ND96asr_v4 layout (GPU 0 lives on NUMA node 1)."""
    pid = sleepers({0}, env={"LOCAL_RANK": "0"})
    proc = read_process(pid, gpus=8)
    numa = [NumaNode(0, list(range(0, 24))), NumaNode(1, list(range(24, 48))), NumaNode(2, list(range(48, 72))),
            NumaNode(3, list(range(72, 96)))]
    check_processes([proc], numa, [1, 1, 0, 0, 3, 3, 2, 2])
    assert any("GPU 0 on NUMA node 1 but may run on NUMA node(s) [0]" in w for w in proc.warnings)


def test_pin_check_unknown_pid_is_exit_2():
    proc = run_gpuval("pin", "check", "999999999")
    assert proc.returncode == 2 and "no process 999999999" in proc.stderr


def test_plans_for_each_launcher_on_the_a100_layout():
    numa = [NumaNode(i, list(range(24 * i, 24 * i + 24))) for i in range(4)]
    bindings = plan_bindings(numa, [1, 1, 0, 0, 3, 3, 2, 2], 8)
    assert [(b.gpu, b.numa_node, b.cpus[0], b.cpus[-1]) for b in bindings[:3]] == [(0, 1, 24, 35), (1, 1, 36, 47),
                                                                                    (2, 0, 0, 11)]
    assert "rank 0=+n0 slot=24-35" in render(bindings, "mpirun")
    assert render(bindings, "srun").startswith("srun --ntasks-per-node=8 --cpu-bind=mask_cpu:0xfff000000,0xfff000000000,0xfff,")
    assert "numactl -N 1 -m 1 -C 24-35 <command>" in render(bindings, "numactl")
    assert '0) exec numactl -N 1 -m 1 -C 24-35 "$@" ;;' in render(bindings, "torchrun")


def test_pin_plan_cli_from_a_sku_and_from_this_machine():
    proc = run_gpuval("pin", "plan", "--launcher", "srun", "--ranks-per-node", "8", "--sku", "Standard_ND96isr_H100_v5",
                      "--json")
    doc = json.loads(proc.stdout)
    assert doc["ranks"][0] == {"local_rank": 0, "gpu": 0, "numa_node": 0, "cpus": "0-11"}
    assert doc["ranks"][7]["cpus"] == "84-95"
    here = run_gpuval("pin", "plan", "--launcher", "numactl", "--ranks-per-node", "1")
    assert here.returncode == 0 and "numactl -N 0" in here.stdout
    bad = run_gpuval("pin", "plan", "--launcher", "aprun", "--ranks-per-node", "1")
    assert bad.returncode == 2 and "unknown launcher 'aprun'" in bad.stderr


def test_pin_plan_and_the_slurm_job_agree_on_ndv4_masks():
    """`gpuval pin plan` with the NDv4 preset's GPU order prints the masks the rendered sbatch binds with."""
    from gpuval.engines.binding import srun_cpu_bind
    from gpuval.engines.presets import preset_for
    from gpuval.engines.spec import JobSpec

    proc = run_gpuval("pin", "plan", "--launcher", "srun", "--ranks-per-node", "8", "--sku", "Standard_ND96asr_v4",
                      "--gpu-order", "2,1,7,5,3,0,6,4")
    assert proc.returncode == 0, proc.stderr
    spec = JobSpec(name="x", command=["true"], nodes=1, procs_per_node=8, gpus_per_node=8,
                   network=preset_for("Standard_ND96asr_v4"))
    assert srun_cpu_bind(spec) in proc.stdout


def test_pin_plan_rejects_a_bad_gpu_order():
    proc = run_gpuval("pin", "plan", "--launcher", "srun", "--ranks-per-node", "8", "--sku", "Standard_ND96asr_v4",
                      "--gpu-order", "a,b")
    assert proc.returncode == 2 and "--gpu-order" in proc.stderr and "Traceback" not in proc.stderr
