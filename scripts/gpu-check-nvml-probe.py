"""The GPU check's NVML probe (scripts/gpu-check.sh): what NVML answers on this GPU to the reads gpuval depends on,
one JSON document on stdout, each read on its own (an error is recorded as NVML's words, never stops the probe).

    python scripts/gpu-check-nvml-probe.py

Per GPU: the identity the GPU model is found by (PCI device and subsystem ids, default and enforced power, PCIe
generation of the GPU and of the host), the field values gpuval reads and the power smoothing ones beside them
(gpuval.node.nvml_state FIELD_IDS and PROBE_FIELD_IDS, by name and id: 74, 76, 269-271, 82, 251-253), the
temperature thresholds, memory in use (nvmlMemory_v2: used beside reserved), utilization, PCIe throughput and the
compute, graphics and MPS process lists; for the machine, nvidia-ml-py's version and whether this process runs in
the host's PID namespace (what the busy guard's attribution rests on).
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any, Callable

import pynvml

from gpuval.node.nvml_activity import pid_namespace_is_hosts
from gpuval.node.nvml_state import FIELD_IDS, PROBE_FIELD_IDS, field_id

THRESHOLDS = ("SHUTDOWN", "SLOWDOWN", "MEM_MAX", "GPU_MAX")


def read(call: Callable[[], Any]) -> Any:
    """The answer, or {"error": NVML's words} (the probe records what fails, it never stops)."""
    try:
        return call()
    except (pynvml.NVMLError, AttributeError, TypeError) as exc:
        return {"error": str(exc) or type(exc).__name__}


def fields(h: Any) -> dict[str, Any]:
    """Every field of FIELD_IDS and PROBE_FIELD_IDS: its id, NVML's return code, value type and value."""
    names = [*FIELD_IDS, *PROBE_FIELD_IDS]
    got = read(lambda: pynvml.nvmlDeviceGetFieldValues(h, [field_id(pynvml, n) for n in names]))
    if isinstance(got, dict):
        return got
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return {n: {"id": int(v.fieldId), "return": int(v.nvmlReturn), "type": int(v.valueType),
                "value": getattr(v.value, members.get(int(v.valueType), "ullVal"))} for n, v in zip(names, got)}


def processes(call: Callable[[Any], Any], h: Any) -> Any:
    got = read(lambda: call(h))
    return got if isinstance(got, dict) else [{"pid": int(p.pid), "used_bytes": p.usedGpuMemory} for p in got]


def gpu(index: int) -> dict[str, Any]:
    """What NVML answers for one GPU."""
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = read(lambda: pynvml.nvmlDeviceGetPciInfo(h))
    memory = read(lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2))
    rates = read(lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
    return {
        "index": index, "name": read(lambda: pynvml.nvmlDeviceGetName(h)),
        "pci_device_id": f"0x{pci.pciDeviceId:08X}" if not isinstance(pci, dict) else pci,
        "pci_subsystem_id": f"0x{pci.pciSubSystemId:08X}" if not isinstance(pci, dict) else pci,
        "power_default_mw": read(lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)),
        "power_enforced_mw": read(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)),
        "pcie_gen_max_gpu": read(lambda: pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
        "pcie_gen_max": read(lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "fields": fields(h),
        "thresholds_c": {t: read(lambda t=t: pynvml.nvmlDeviceGetTemperatureThreshold(
            h, getattr(pynvml, f"NVML_TEMPERATURE_THRESHOLD_{t}"))) for t in THRESHOLDS},
        "memory_mib": memory if isinstance(memory, dict) else {"used": memory.used // 2**20,
                                                               "reserved": memory.reserved // 2**20},
        "utilization": rates if isinstance(rates, dict) else {"gpu": rates.gpu, "memory": rates.memory},
        "pcie_kb_s": {d: read(lambda d=d: pynvml.nvmlDeviceGetPcieThroughput(
            h, getattr(pynvml, f"NVML_PCIE_UTIL_{d}_BYTES"))) for d in ("TX", "RX")},
        "processes": {"compute": processes(pynvml.nvmlDeviceGetComputeRunningProcesses, h),
                      "graphics": processes(pynvml.nvmlDeviceGetGraphicsRunningProcesses, h),
                      "mps": processes(pynvml.nvmlDeviceGetMPSComputeRunningProcesses, h)},
    }


def main() -> None:
    pynvml.nvmlInit()
    try:
        doc = {"nvidia_ml_py": metadata.version("nvidia-ml-py"), "driver": pynvml.nvmlSystemGetDriverVersion(),
               "host_pid_namespace": pid_namespace_is_hosts(),
               "gpus": [gpu(i) for i in range(pynvml.nvmlDeviceGetCount())]}
    finally:
        pynvml.nvmlShutdown()
    print(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
