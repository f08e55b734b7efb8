"""The pass / warn / fail / error / skipped rows of the GPU state checks (temperature, firmware, gpu_mode,
cuda_init) and the findings added to row_remap and clock_throttle, for tests/checks/test_suite.py's matrix.

The good values are the real H200 VM's (h200-vm.yaml: its nvidia-smi -q, NVML on a lent H200); each bad one
changes one field of it, as NVML would answer on a broken or misconfigured GPU. The A100 recording predates these
reads: there they are not reported, and the checks say so.
"""

from __future__ import annotations

from gpuval.results.model import Status
from tests.health_support import A100, H100, data_set, gpu, unreadable

P, W, F, E, S = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR, Status.SKIPPED
H200 = "h200-vm"
_TEMPS = {"gpu_c": 35, "memory_c": 33, "gpu_slowdown_c": 89, "memory_max_c": 95}
_COUNTERS = {"sw_power_cap_s": 0.0, "sync_boost_s": 0.0, "sw_thermal_s": 0.0, "hw_thermal_s": 0.0,
             "hw_power_brake_s": 0.0}
_DENIED = unreadable("gpu_inventory", "NVML says Unknown Error")


def _cuda(start: dict, *changes) -> "object":
    """A change: what cuInit said (`cuda_start`), with more changes applied after it."""
    def apply(data: dict) -> None:
        data_set("cuda_start", start)(data)
        for change in changes:
            change(data)
    return apply


NO_DEVICE = {"error_code": 100, "error": "no CUDA-capable device is detected (CUDA error 100)"}
STALE_MIG = "MIG-5c4a3d42-8f2a-5b5e-9d51-1a2b3c4d5e6f"  # the MIG instance of a GPU since repartitioned: gone
# CUDA's words for 803 and 804 (cuda.h, cuGetErrorString)
MISMATCH = {"error_code": 803, "error": "system has unsupported display driver / cuda driver combination (CUDA "
                                        "error 803)"}
COMPAT = {"error_code": 804, "error": "forward compatibility was attempted on non supported HW (CUDA error 804)"}


def _load(power_w: float, gpu_c: int, hbm_c: int, reasons: list[str] | None = None) -> "object":
    """A change: what NVML sampled under the sustained load (power peak, GPU and HBM temperature, reasons)."""
    def apply(data: dict) -> None:
        data["measurements"].update(load_power_w=power_w, load_temperature_c=gpu_c, load_memory_temperature_c=hbm_c,
                                    load_reasons=["software power cap"] if reasons is None else reasons)
    return apply


def _two_vbios(data: dict) -> None:
    """The A100 node with its GPUs' VBIOS read: GPU 5 flashed with another version than the other seven."""
    data["gpu_defaults"]["vbios"] = "92.00.45.00.03"
    data["gpus"][5]["vbios"] = "92.00.45.00.06"


CASES = [
    ("temperature", H200, None, P, "hottest GPU 35 C, HBM 33 C, each under its limit"),
    # idle temperature is reported; near a limit it is judged under load (clocks_under_load)
    ("temperature", H200, gpu(0, temperature={**_TEMPS, "gpu_c": 86}), P, "hottest GPU 86 C, HBM 33 C, each under "
                                                                           "its limit"),
    ("temperature", H200, gpu(0, temperature={**_TEMPS, "memory_c": 95}), F,
     "HBM 95 C at or over the HBM's maximum operating temperature (95 C)"),
    ("temperature", H200, _DENIED, E, "could not run: NVML says Unknown Error"),
    ("temperature", A100, None, S, "the driver reports no temperature"),
    ("temperature", H200, gpu(0, temperature={"gpu_c": 35, "memory_c": 33}), S, "reports no limit, not judged"),
    ("firmware", H200, None, P, "VBIOS 96.00.A5.00.1A on 1 GPUs; inforom valid on 1"),
    ("firmware", A100, _two_vbios, W, "VBIOS versions differ (92.00.45.00.03 on GPU 0, 1, 2, 3, 4, 6, 7; "
                                      "92.00.45.00.06 on GPU 5)"),
    ("firmware", H200, gpu(0, inforom_valid=False, inforom_error="Corrupted infoROM"), F,
     "GPU 0: inforom invalid (Corrupted infoROM)"),
    ("firmware", H200, _DENIED, E, "could not run"),
    ("firmware", A100, None, S, "neither inforom validity nor VBIOS"),
    ("gpu_mode", H200, None, P, "compute mode default on 1 GPUs; virtualization: PCI pass-through (a VM); "
                                "confidential compute off"),
    ("gpu_mode", H200, gpu(0, compute_mode="exclusive_process"), W, "compute mode Exclusive Process"),
    ("gpu_mode", H200, gpu(0, compute_mode="prohibited"), W, "Prohibited (no process may use the GPU)"),
    ("gpu_mode", H200, gpu(0, virtualization="vgpu"), W, "a vGPU: its figures are of a share of a GPU"),
    ("gpu_mode", H200, _DENIED, E, "could not run"),
    ("gpu_mode", A100, None, S, "the driver reports no compute mode"),
    ("cuda_init", H200, None, P, "CUDA starts: 1 device(s), NVML sees 1 GPU(s)"),
    ("cuda_init", H200, data_set("cuda_start", {"error_code": 802, "error": "system not yet initialized (CUDA "
                                                "error 802)"}), F,
     "NVML sees 1 GPU(s) but CUDA cannot start: system not yet initialized (CUDA error 802) (CUDA error 802, "
     "system not yet initialized: on an NVSwitch system (HGX A100/H100/H200) the fabric manager is not running"),
    ("cuda_init", H200, data_set("cuda_start", {"error_code": 999, "error": "unknown error (CUDA error 999)"}), F,
     "CUDA cannot start: unknown error (CUDA error 999)"),
    ("cuda_init", H200, data_set("cuda_start", {"error_code": 100, "error": "no CUDA-capable device is detected "
                                                "(CUDA error 100)", "env": {"CUDA_VISIBLE_DEVICES": "none"}}), E,
     "could not run: CUDA_VISIBLE_DEVICES='none' hides the 1 GPU(s) NVML sees from CUDA"),
    ("cuda_init", H200, data_set("cuda_start", {"error_code": 100, "error": "no CUDA-capable device is detected "
                                                "(CUDA error 100)", "env": {"CUDA_VISIBLE_DEVICES": "3"}}), E,
     "CUDA_VISIBLE_DEVICES='3' hides"),  # an index this one-GPU node does not have
    ("cuda_init", H200, data_set("cuda_start", {"error_code": 100, "error": "no CUDA-capable device is detected "
                                                "(CUDA error 100)", "env": {"NVIDIA_VISIBLE_DEVICES": "void"}}), E,
     "NVIDIA_VISIBLE_DEVICES='void' hides"),
    ("cuda_init", A100, None, S, "has no CUDA start-up recorded"),
    # "nvidia-smi shows 8, torch 7": a GPU NVML sees that CUDA does not, nothing limiting what CUDA may see
    ("cuda_init", H100, _cuda({"devices": 7}), F, "CUDA counts 7 device(s) of the 8 GPU(s) NVML sees, with nothing "
                                                  "limiting what CUDA may see and MIG off"),
    ("cuda_init", H100, _cuda({"devices": 3, "env": {"CUDA_VISIBLE_DEVICES": "0,1,2"}}), P,
     "CUDA starts: 3 device(s), NVML sees 8 GPU(s) (CUDA_VISIBLE_DEVICES=0,1,2)"),
    ("cuda_init", H100, _cuda({"devices": 1}, gpu(2, mig_current=True)), P,
     "MIG is on (GPU 2): CUDA counts MIG instances, not GPUs"),
    # a stale MIG or GPU UUID in CUDA_VISIBLE_DEVICES names nothing NVML has: the environment, not the node
    ("cuda_init", H200, _cuda({**NO_DEVICE, "env": {"CUDA_VISIBLE_DEVICES": STALE_MIG}}), E,
     f"could not run: CUDA_VISIBLE_DEVICES='{STALE_MIG}' hides the 1 GPU(s) NVML sees from CUDA"),
    ("cuda_init", H200, _cuda({**NO_DEVICE, "env": {"CUDA_VISIBLE_DEVICES": "GPU-deadbeef"}}), E,
     "could not run: CUDA_VISIBLE_DEVICES='GPU-deadbeef' hides"),
    ("cuda_init", H200, _cuda({**NO_DEVICE, "env": {"CUDA_VISIBLE_DEVICES": STALE_MIG}},
                              gpu(0, mig_current=True, mig_devices=[{"uuid": STALE_MIG}])), F,
     "NVML sees 1 GPU(s) but CUDA cannot start: no CUDA-capable device is detected"),  # the MIG instance exists
    # 803/804: the CUDA driver library this process loaded does not go with the kernel driver (an image's compat)
    ("cuda_init", H200, _cuda(MISMATCH), E, "could not run: system has unsupported display driver / cuda driver "
                                            "combination (CUDA error 803): the CUDA driver library this process "
                                            "loaded does not match the kernel driver 580.159.04"),
    ("cuda_init", H200, _cuda(COMPAT), E, "could not run: forward compatibility was attempted on non supported HW "
                                          "(CUDA error 804)"),
    # under the sustained load, as DCGM's targeted_power: the power reached while the power cap holds the clocks,
    # the hottest GPU and HBM against the driver's limits (89 C slowdown, 95 C HBM on the lent H200)
    ("clocks_under_load", H200, _load(743.78, 71, 66), P,
     "peak power 744 W of a 700 W limit at the lowest (106%), hottest GPU 71 C (limit 89 C), hottest HBM 66 C "
     "(limit 95 C)"),
    ("clocks_under_load", H200, _load(610.0, 71, 66), W,
     "peak power 610 W at its 700 W limit, in %: 87.1429 % is under the warn limit 95 %"),
    ("clocks_under_load", H200, _load(480.0, 71, 66), F, "peak power 480 W at its 700 W limit, in %: 68.5714 % is "
                                                         "under the fail limit 75 %"),
    ("clocks_under_load", H200, _load(480.0, 71, 66, reasons=[]), P,
     "peak power 480 W of a 700 W limit at the lowest (69%; not judged: the software power cap never held"),
    ("clocks_under_load", H200, _load(743.78, 86, 66), W, "GPU 86 C under load, C under its limit 89 C: 3 C is "
                                                          "under the warn limit 5 C"),
    ("clocks_under_load", H200, _load(743.78, 71, 95), F, "HBM 95 C under load, C under its limit 95 C: 0 C is "
                                                          "under the fail limit 1 C"),
    # findings in existing checks: spare rows, unrepairable memory, throttle time since the driver loaded
    ("row_remap", H200, gpu(0, remap_histogram={"max": 3060, "high": 0, "partial": 0, "low": 10, "none": 2}), W,
     "spare rows running out: 2 bank(s) with none left, 10 low (of 3072)"),
    ("row_remap", H200, gpu(0, unrepairable_memory=True), F, "unrepairable memory"),
    ("clock_throttle", H200, gpu(0, clock_event_counters={**_COUNTERS, "sw_power_cap_s": 65.71149}), P,
     "software power cap since the driver loaded (normal at the power limit): GPU 0 65.7 s"),
    ("clock_throttle", H200, gpu(0, clock_event_counters={**_COUNTERS, "hw_thermal_s": 12.5}), W,
     "clocks held since the driver loaded by hardware thermal slowdown 12.5 s"),
]

CANNOT = {
    ("gpu_mode", F): "a compute mode is a setting: a warn; gpuval's measurements refuse it (COMPUTE_MODE errors)",
    ("cuda_init", W): "CUDA starts or it does not",
    ("temperature", W): "idle temperatures are reported; near a limit is judged under load (clocks_under_load warns)",
}
