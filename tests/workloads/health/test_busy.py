"""A busy GPU is not a broken GPU, and CUDA that cannot start is said once: the measuring
guard on the real H200 VM's recordings, idle and while another process ran GEMMs on it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml

from gpuval.checks.base import REGISTRY
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context, run_suite
from gpuval.node.machine import GpuActivity, GpuProcess
from gpuval.node.recorded import RecordedMachine, recorded_data
from gpuval.results.model import Status
from gpuval.workloads.burn.run import run_burn
from gpuval.workloads.health.busy import MeasuringGuard
from tests.health_support import no_imds  # noqa: F401

H200_SKU = "Standard_ND96isr_H200_v5"  # its baseline judged the run's busy figures as hardware faults


def _run(machine: RecordedMachine, names: list[str], sku: str | None = None, allow_busy: bool = False) -> dict:
    ctx = make_context(machine, sku, (), RecordedMeasurer(machine.measurements, machine.description), repeats=1)
    checks = MeasuringGuard(allow_busy).wrap([REGISTRY[n] for n in names])
    return {r.name: r for r in run_suite(ctx, checks).results}


def test_without_the_guard_the_busy_gpu_was_blamed_and_with_it_it_is_busy():
    """The real run: HBM triad 2117 GB/s judged against the H200 SKU failed HBM_SLOW ("a memory clock or HBM stack
    fault"). Guarded: ERROR GPU_BUSY naming the other process, nothing measured, no hardware fault code."""
    busy = RecordedMachine.load("h200-vm-busy")
    ctx = make_context(busy, H200_SKU, (), RecordedMeasurer(busy.measurements, busy.description), repeats=1)
    [blamed] = run_suite(ctx, [REGISTRY["hbm_bandwidth"]]).results
    assert blamed.status is Status.FAIL and blamed.fault_code == "HBM_SLOW"
    results = _run(busy, ["hbm_bandwidth", "gemm_sustained", "clocks_under_load", "gemm_tflops"], H200_SKU)
    for r in results.values():
        assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY", r
        assert "GPU 0 used by pid 1255 python3 (1002 MiB): not measured" in r.reason and "--allow-busy" in r.reason
        assert r.value is None and r.details["processes"][0]["pid"] == 1255


def test_the_idle_h200_is_measured_and_judged_as_before():
    idle = RecordedMachine.load("h200-vm")
    hbm = _run(idle, ["hbm_bandwidth"], H200_SKU)["hbm_bandwidth"]
    assert hbm.status is Status.PASS and hbm.fault_code == "HBM_SLOW" and "processes" not in hbm.details


def test_a_load_in_another_container_shows_as_utilization():
    data = recorded_data("h200-vm")
    data["gpu_utilization_pct"] = {0: 100}  # no process NVML can name here, the GPU fully used all the same
    [r] = _run(RecordedMachine(data), ["hbm_bandwidth"]).values()
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "GPU 0 100% utilized by a process not visible here (another container?)" in r.reason
    data["gpu_utilization_pct"] = {0: 2}  # gpuval's own last kernels fading: not another load
    # not busy: measured, and judged by its GPU model with no SKU (H200 SXM, gpuval's own calibration)
    assert _run(RecordedMachine(data), ["hbm_bandwidth"])["hbm_bandwidth"].status is Status.PASS


class _StartsDuring(RecordedMachine):
    """Idle when the check starts measuring, busy when it ends: another job started meanwhile."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.asked = 0

    def gpu_activity(self, gpus: list[int]) -> GpuActivity:
        self.asked += 1
        return GpuActivity([GpuProcess(0, 4242, "pt_main_thread", 30720)] if self.asked > 1 else [])


def test_a_process_that_starts_while_gpuval_measures_makes_the_figure_unjudged():
    machine = _StartsDuring(recorded_data("h200-vm"))
    r = _run(machine, ["hbm_bandwidth"], H200_SKU)["hbm_bandwidth"]
    assert machine.asked == 2  # before the first measurement and after the check
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY" and r.value == 4383  # measured: triad
    assert "pid 4242 pt_main_thread (30720 MiB) while it measured: not judged" in r.reason


def test_allow_busy_measures_and_reports_without_judging():
    r = _run(RecordedMachine.load("h200-vm-busy"), ["hbm_bandwidth"], H200_SKU, allow_busy=True)["hbm_bandwidth"]
    assert r.status is Status.SKIPPED and r.value == 2116.58 and "GPU 0 used by pid 1255 python3 (1002 MiB): reported, " \
        "not judged (--allow-busy); on an idle GPU the bands would say: " in r.reason  # the figure, not its verdict
    assert r.details["processes"][0]["pid"] == 1255


def test_a_check_that_measures_nothing_keeps_its_verdict_and_asks_nothing():
    machine = _StartsDuring(recorded_data("h200-vm-busy"))
    r = _run(machine, ["p2p_bandwidth"])["p2p_bandwidth"]
    assert r.status is Status.SKIPPED and "no pair to measure" in r.reason and machine.asked == 0


def test_a_compute_mode_that_refuses_gpuvals_processes_is_an_error_before_measuring():
    data = recorded_data("h200-vm")
    data["gpus"][0]["compute_mode"] = "exclusive_process"
    r = _run(RecordedMachine(data), ["gemm_tflops"])["gemm_tflops"]
    assert r.status is Status.ERROR and r.fault_code == "COMPUTE_MODE" and r.value is None
    assert "GPU 0 in compute mode Exclusive Process" in r.reason


def _cuda(start: dict[str, Any]) -> RecordedMachine:
    data = recorded_data("h200-vm")
    data["cuda_start"] = start
    return RecordedMachine(data)


FM_DOWN = {"error_code": 802, "error": "system not yet initialized (CUDA error 802)"}
HIDDEN = {"error_code": 100, "error": "no CUDA-capable device is detected (CUDA error 100)",
          "env": {"CUDA_VISIBLE_DEVICES": "none"}}


def test_cuda_that_cannot_start_is_said_once_by_cuda_init():
    results = _run(_cuda(FM_DOWN), ["gpu_count", "cuda_init", "gemm_tflops", "hbm_bandwidth"])
    assert results["cuda_init"].status is Status.FAIL and results["cuda_init"].fault_code == "CUDA_INIT"
    for name in ("gemm_tflops", "hbm_bandwidth"):
        assert results[name].status is Status.ERROR and results[name].fault_code == "CUDA_INIT"
        assert results[name].reason == "could not run: not measured: CUDA cannot start here (cuda_init says why)"
    said = [r.name for r in results.values() if "system not yet initialized" in r.reason]
    assert said == ["cuda_init"]


def test_without_cuda_init_the_first_measuring_check_says_it_and_the_next_points_to_it():
    """run2's `CUDA_VISIBLE_DEVICES=none` run (gemm_tflops and hbm_bandwidth only): "No CUDA GPUs are available"
    was printed twice in one line and again in the next; now the variable is named once."""
    results = _run(_cuda(HIDDEN), ["gpu_count", "gemm_tflops", "hbm_bandwidth"])
    first, second = results["gemm_tflops"], results["hbm_bandwidth"]
    assert first.status is Status.ERROR and first.fault_code == "CUDA_INIT"
    assert first.reason.startswith("could not run: CUDA_VISIBLE_DEVICES='none' hides the 1 GPU(s) NVML sees")
    assert first.reason.count("CUDA_VISIBLE_DEVICES") == 1
    assert second.reason == "could not run: not measured: CUDA cannot start here (cuda_init says why)"
    results = _run(_cuda(FM_DOWN), ["gemm_tflops", "hbm_bandwidth"])
    assert results["gemm_tflops"].status is Status.FAIL and results["gemm_tflops"].fault_code == "CUDA_INIT"
    assert "nvidia-fabricmanager" in results["gemm_tflops"].reason


def test_burn_on_a_busy_gpu_is_busy_not_a_pass_at_half_the_tflops():
    """The real run's burn PASSED at 314 TFLOPS (half of 669) since it judged only the spread."""
    run = run_burn(10.0, "h200-vm-busy", None, [], None, "test-burn")
    assert run.result.status is Status.ERROR and run.result.fault_code == "GPU_BUSY"
    assert "pid 1255 python3" in run.result.reason and run.record.status is Status.ERROR
    allowed = run_burn(10.0, "h200-vm-busy", None, [], None, "test-burn", allow_busy=True)
    assert allowed.result.status is Status.SKIPPED and allowed.result.value == 310.093
    assert run_burn(10.0, "h200-vm", None, [], None, "test-burn").result.status is Status.PASS


def test_a_cuda_start_that_cannot_be_read_does_not_stop_the_measurements():
    """cuda_init that could not tell (libcuda unreadable) is its own error; the measuring checks still measure."""
    from tests.health_support import machine as changed, unreadable

    broken = changed("h200-vm", unreadable("cuda_start", "libcuda.so.1: cannot open shared object file"))
    results = _run(broken, ["cuda_init", "hbm_bandwidth"], H200_SKU)
    assert results["cuda_init"].status is Status.ERROR and "libcuda.so.1" in results["cuda_init"].reason
    assert results["hbm_bandwidth"].status is Status.PASS and results["hbm_bandwidth"].value == 4383


class _OwnContextLater(RecordedMachine):
    """gpuval in a PID namespace of its own (pid_namespace: own): nothing on the GPU at the first read, then one
    host pid NVML lists from the first measurement on: gpuval's own context, or a job that started meanwhile."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__({**data, "pid_namespace": "own"})
        self.asked = 0

    def gpu_activity(self, gpus: list[int]) -> GpuActivity:
        self.asked += 1
        seen = super().gpu_activity(gpus)
        return replace(seen, processes=[GpuProcess(0, 88231, "", 1536)] if self.asked > 1 else [])


def test_in_a_pid_namespace_a_pid_new_since_gpuval_opened_its_context_counts_only_while_its_gpu_is_loaded():
    """NVML names gpuval's own context by its host pid there: unnamed, new since the first read and idle, it is
    not another load; new and the GPU loaded, it is, named by host pid."""
    data = recorded_data("h200-vm")
    data["gpu_utilization_pct"] = {0: 0}
    machine = _OwnContextLater(data)
    results = _run(machine, ["hbm_bandwidth", "gemm_tflops"])
    assert machine.asked == 4 and results["gemm_tflops"].status is Status.PASS
    assert "processes cannot be attributed here" in results["hbm_bandwidth"].reason  # said once, on the first
    assert "processes cannot be attributed here" not in results["gemm_tflops"].reason
    data["gpu_utilization_pct"] = {0: 97}
    r = _run(_OwnContextLater(data), ["hbm_bandwidth", "gemm_tflops"])["gemm_tflops"]
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY"
    assert "GPU 0 used by host pid 88231 (1536 MiB), 97% utilized" in r.reason


def test_a_process_that_starts_and_stops_inside_the_sustained_load_makes_it_busy():
    """The guard reads before and after a check: a tenant that came and went inside a 10 s sustained run (or an
    hours-long burn) was never seen. The load's sampler reads the processes meanwhile."""
    data = recorded_data("h200-vm")
    data["measurements"]["load_appeared"] = [{"gpu": 0, "pid": 4242, "name": "pt_main_thread",
                                              "used_memory_mib": 30720}]
    r = _run(RecordedMachine(data), ["gemm_sustained"], H200_SKU)["gemm_sustained"]
    assert r.status is Status.ERROR and r.fault_code == "GPU_BUSY" and r.value == 668.463
    assert "GPU 0 used by pid 4242 pt_main_thread (30720 MiB) from part-way through the load" in r.reason


def test_a_burn_that_another_job_joined_part_way_is_busy(tmp_path):
    path = tmp_path / "joined.yaml"
    path.write_text(yaml.safe_dump({"based_on": "h200-vm", "description": "H200 VM, a job joined the burn",
                                    "measurements": {"load_appeared": [{"gpu": 0, "pid": 4242, "name": "python3",
                                                                        "used_memory_mib": 874}]}}))
    run = run_burn(3600.0, str(path), None, [], None, "test-burn")
    assert run.result.status is Status.ERROR and run.result.fault_code == "GPU_BUSY"
    assert "pid 4242 python3 (874 MiB) from part-way through the load" in run.result.reason


def test_a_cuda_driver_library_that_does_not_match_the_driver_is_said_once_and_measures_nothing():
    """CUDA 803 (an image's cuda-compat libcuda on another driver): an ERROR naming the cause, never a node FAIL;
    the measuring checks after it point to it."""
    results = _run(_cuda({"error_code": 803, "error": "system has unsupported display driver / cuda driver "
                                                      "combination (CUDA error 803)"}),
                   ["cuda_init", "gemm_tflops", "hbm_bandwidth"])
    assert results["cuda_init"].status is Status.ERROR and "does not match the kernel driver" in results["cuda_init"].reason
    for name in ("gemm_tflops", "hbm_bandwidth"):
        assert results[name].status is Status.ERROR and results[name].fault_code == "CUDA_INIT"
        assert results[name].reason == "could not run: not measured: CUDA cannot start here (cuda_init says why)"


def test_fewer_cuda_devices_than_gpus_fails_cuda_init_and_still_measures_the_rest():
    data = recorded_data("Standard_ND96isr_H100_v5")
    data["cuda_start"] = {"devices": 7}
    results = _run(RecordedMachine(data), ["cuda_init", "hbm_bandwidth"])
    assert results["cuda_init"].status is Status.FAIL and "CUDA counts 7 device(s) of the 8" in results["cuda_init"].reason
    # measured on the devices CUDA has; no H100 HBM band is gpuval's own measurement: the floor and the peers judge
    assert results["hbm_bandwidth"].status is Status.PASS and results["hbm_bandwidth"].value == 2970
    assert "band: none" in results["hbm_bandwidth"].reason
