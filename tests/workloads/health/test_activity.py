"""The rules the measuring guard reads the GPUs' activity by (workloads.health.activity), case by case on plain
readings: which read a rule holds at (before or after a check, the first read or a later one) matters."""

from __future__ import annotations

from gpuval.node.machine import GpuActivity, GpuLoad, GpuProcess
from gpuval.workloads.health.activity import load_words, read_activity


def test_memory_in_use_counts_only_at_the_first_read_before_gpuval_has_a_context():
    seen = GpuActivity([], {0: GpuLoad(memory_used_mib=2048)})
    assert read_activity(seen, True, {}, first=True).busy == [
        "GPU 0: 2048 MiB in use before gpuval opened a context, 2048 MiB more than the processes listed here hold"]
    assert read_activity(seen, True, {}, first=False).busy == []  # later: gpuval's own context's memory


def test_before_a_check_the_mean_load_after_it_the_lowest():
    pausing = GpuLoad(gpu_pct_mean=23.1, gpu_pct_min=0, memory_pct_mean=12.0, memory_pct_min=0, pcie_mb_s_mean=900.0,
                      pcie_mb_s_min=0.8)
    assert load_words(pausing, before=True) == "23% utilized, memory 12% busy, PCIe 0.9 GB/s"
    assert load_words(pausing, before=False) is None  # after a check: gpuval's own tail fades, a real load stays
    assert load_words(GpuLoad(), before=True) is None


def test_a_pid_held_at_the_first_read_counts_at_every_read_a_new_one_only_while_loaded():
    tenant, newcomer = GpuProcess(0, 28731, "", 30720), GpuProcess(0, 31337, "", 1536)
    idle = GpuActivity([tenant, newcomer], {0: GpuLoad()}, attributable=False)
    reading = read_activity(idle, False, {0: {28731}}, first=False)
    assert reading.busy[0] == "GPU 0 used by host pid 28731 (30720 MiB)" and len(reading.busy) == 2  # + the words
    assert "cannot be attributed" in reading.busy[1]


def test_an_mps_server_with_clients_is_one_finding_naming_both():
    seen = GpuActivity([GpuProcess(0, 812, "nvidia-cuda-mps", 30, "mps_server"),
                        GpuProcess(0, 4242, "python3", 1024, "mps_client")], {0: GpuLoad()})
    assert read_activity(seen, True, {0: {812, 4242}}, first=True).busy == [
        "GPU 0: MPS server pid 812 nvidia-cuda-mps (30 MiB) with clients pid 4242 python3 (1024 MiB)"]
