"""A stand-in for the pynvml module (no GPU here): the real module's constants and exception classes, with device
functions answering from a table of GPUs. Errors are raised as pynvml raises them (`pynvml.NVMLError(code)` gives
the real subclass, e.g. NVMLError_GpuIsLost), so the code under test meets exactly what NVML would give it.

Install with `install(monkeypatch, fake)`: `import pynvml` then finds the fake.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml as real

from gpuval.node.nccl_topo import normalize_bus_id


@dataclass
class FakeGpu:
    """What one GPU answers; `errors` maps a function name (or "handle") to an NVML error code it raises."""

    bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    # pciDeviceId and pciSubSystemId of nvmlDeviceGetPciInfo: an H100 SXM5's (nvidia-smi -q, tests/data/nvidia-smi)
    device_id: int = 0x233010DE
    subsystem_id: int = 0x16C110DE
    uuid: str = ""
    sm_app: int = 1755
    mem_app: int = 2619
    sm_default: int = 1755
    mem_default: int = 2619
    sm_max: int = 1980
    mem_max: int = 2619
    sm_now: int = 1980
    reasons: int = 0
    power_now_mw: int = 650_000  # nvmlDeviceGetPowerUsage
    mig: tuple[int, int] | None = None
    mig_uuids: list[str] = field(default_factory=list)  # its MIG instances' UUIDs (MIG on)
    mig_instances: list[tuple[int, int]] = field(default_factory=list)  # (GPU instance, compute instance) of each
    errors: dict[str, int] = field(default_factory=dict)
    # power, ECC by location, PCIe replays, NVLink errors, fabric, recovery action; None: "not supported" as an
    # older GPU or driver answers
    power_mw: tuple[int, int, int, int] | None = None  # enforced, default, min, max (milliwatts, as NVML answers)
    ecc_located: dict[tuple[int, int, int], int] | None = None  # (error type, counter, location) -> count
    sram_threshold: int | None = None  # bThresholdExceeded of nvmlDeviceGetSramEccErrorStatus
    replays: int | None = None
    nvlink_errors: dict[tuple[int, int], int] | None = None  # (link, counter) -> count
    fabric: tuple[int, int, int] | None = None  # state, status (an NVML return code), clique id
    # the rest of the fabric info: health mask and summary (v2/v3; None: the DEGRADED_BW_FALSE mask of R550), cluster
    # UUID bytes, and whether the driver answers v4 (cliques, R570+)
    fabric_health: tuple[int, int] | None = None
    fabric_uuid: bytes = bytes(16)
    fabric_v4: bool = False
    recovery_action: int | None = None
    # the NVML state reads (None: not supported), answered as the lent H200 answered them (tests/data/nvml)
    fields: dict[int, int] = field(default_factory=dict)  # NVML field id -> value (uint64: counters, temperatures)
    thresholds: dict[int, int] = field(default_factory=dict)  # NVML_TEMPERATURE_THRESHOLD_* -> C
    histogram: tuple[int, int, int, int, int] | None = None  # max, high, partial, low, none
    unrepairable: int | None = None
    inforom_error: int | None = None  # the NVML error ValidateInforom raises (None: valid)
    vbios: str | None = None
    compute_mode: int | None = None
    virtualization: int | None = None
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes): compute processes
    graphics: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes): graphics processes
    mps_clients: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes): MPS client processes
    utilization: list[int] = field(default_factory=list)  # successive nvmlDeviceGetUtilizationRates answers (gpu)
    memory_utilization: list[int] = field(default_factory=list)  # ... and their memory
    pcie_kb_s: list[tuple[int, int]] = field(default_factory=list)  # successive PCIe (tx, rx) KB/s
    memory_used: int = 0  # bytes in use (nvmlMemory_v2: the driver's reserve apart)


class FakeNvml:
    """The GPUs of one node; `calls` records every setting applied, in order."""

    def __init__(self, gpus: list[FakeGpu], driver: str = "550.54.15") -> None:
        self.gpus = gpus
        self.driver = driver
        self.calls: list[tuple[str, int, tuple[Any, ...]]] = []

    def module(self) -> types.ModuleType:
        fake = types.ModuleType("pynvml")
        fake.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("nvml")})
        fake.__dict__.update({k: v for k, v in vars(real).items()
                              if k.startswith(("nvmlClocks", "nvmlEventType", "nvmlMemory_v"))})
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(fake, name, getattr(self, name))

        def unsupported(name: str) -> Any:  # any other NVML function: this GPU or driver does not have it
            if not name.startswith("nvml"):
                raise AttributeError(name)

            def call(*args: Any) -> Any:
                raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
            return call

        fake.__getattr__ = unsupported  # type: ignore[method-assign]
        return fake

    # ---- system ---------------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check(index, "handle")
        return index

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> int:
        """The GPU at PCI bus id `bus`, in any domain width NVML takes; NOT_FOUND where no GPU is there."""
        wanted = normalize_bus_id(bus)
        for index, gpu in enumerate(self.gpus):
            if normalize_bus_id(gpu.bus_id) == wanted:
                return self.nvmlDeviceGetHandleByIndex(index)
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    # ---- reads ----------------------------------------------------------------------------------------------------

    def _check(self, h: int, what: str) -> FakeGpu:
        gpu = self.gpus[h]
        code = gpu.errors.get(what)
        if code is not None:
            raise real.NVMLError(code)
        return gpu

    def _read(self, what: str, h: int, value: Any) -> Any:
        self._check(h, what)
        return value

    def nvmlDeviceGetName(self, h):
        return self._check(h, "name").name

    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, tuple):  # a MIG instance's handle: (GPU, instance)
            return self.gpus[h[0]].mig_uuids[h[1]]
        g = self._check(h, "uuid")
        return g.uuid or f"GPU-00000000-0000-0000-0000-{h:012d}"

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if self.gpus[h].mig else 0  # an H100's most instances

    def _instance(self, h: tuple[int, int], which: int) -> int:
        known = self.gpus[h[0]].mig_instances
        if h[1] >= len(known):
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return known[h[1]][which]

    def nvmlDeviceGetGpuInstanceId(self, h):
        return self._instance(h, 0)

    def nvmlDeviceGetComputeInstanceId(self, h):
        return self._instance(h, 1)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        if index >= len(self.gpus[h].mig_uuids):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return (h, index)

    def nvmlDeviceGetPciInfo(self, h):
        gpu = self._check(h, "pci")
        return types.SimpleNamespace(busId=gpu.bus_id.encode(), pciDeviceId=gpu.device_id,
                                     pciSubSystemId=gpu.subsystem_id)

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        return types.SimpleNamespace(total=80 * 2**30, used=self.gpus[h].memory_used, reserved=454 * 2**20)

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 0

    def nvmlDeviceGetRemappedRows(self, h):
        return (0, 0, 0, 0)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._check(h, "reasons").reasons

    def nvmlDeviceGetMigMode(self, h):
        mig = self._check(h, "mig").mig
        if mig is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return list(mig)

    def _clock(self, h: int, what: str, kind: int, sm: str, mem: str) -> int:
        g = self._check(h, what)
        return getattr(g, sm if kind == real.NVML_CLOCK_SM else mem)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._clock(h, "clock", kind, "sm_now", "mem_app")

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        return self._clock(h, "app_clock", kind, "sm_app", "mem_app")

    def nvmlDeviceGetDefaultApplicationsClock(self, h, kind):
        return self._clock(h, "default_clock", kind, "sm_default", "mem_default")

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return self._clock(h, "max_clock", kind, "sm_max", "mem_max")

    def nvmlDeviceGetPersistenceMode(self, h):
        return real.NVML_FEATURE_ENABLED

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    nvmlDeviceGetMaxPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    nvmlDeviceGetMaxPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth

    def nvmlDeviceGetPowerUsage(self, h):
        return self._read("power", h, self.gpus[h].power_now_mw)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._read("temperature", h, 61)

    def nvmlDeviceGetSupportedMemoryClocks(self, h):
        return self._read("supported_clocks", h, [self.gpus[h].mem_max])

    def nvmlDeviceGetSupportedGraphicsClocks(self, h, mem):
        return self._read("supported_clocks", h, [self.gpus[h].sm_max, 1410])

    # ---- power, ECC by location, PCIe replays, NVLink errors, fabric, recovery action, events -----------

    def _supported(self, h: int, what: str, value: Any) -> Any:
        self._check(h, what)
        if value is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._supported(h, "power", self.gpus[h].power_mw)[0]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._supported(h, "power", self.gpus[h].power_mw)[1]

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return list(self._supported(h, "power", self.gpus[h].power_mw)[2:])

    def nvmlDeviceGetMemoryErrorCounter(self, h, kind, counter, location):
        located = self._supported(h, "ecc_located", self.gpus[h].ecc_located)
        if (kind, counter, location) not in located:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return located[(kind, counter, location)]

    def nvmlDeviceGetSramEccErrorStatus(self, h, status):
        status._obj.bThresholdExceeded = self._supported(h, "sram", self.gpus[h].sram_threshold)
        return real.NVML_SUCCESS

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._supported(h, "replays", self.gpus[h].replays)

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        errors = self._supported(h, "nvlink_errors", self.gpus[h].nvlink_errors)
        if link >= 18:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return errors.get((link, counter), 0)

    def _fabric_into(self, h: int, struct: Any) -> None:
        gpu = self.gpus[h]
        struct.state, struct.status = gpu.fabric[0], gpu.fabric[1]
        mask, summary = gpu.fabric_health or (real.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE, 0)
        struct.healthMask = mask
        if hasattr(struct, "healthSummary"):
            struct.healthSummary = summary
        struct.clusterUuid[:] = list(gpu.fabric_uuid)

    def nvmlDeviceGetGpuFabricInfoV(self, h, info):
        self._supported(h, "fabric", self.gpus[h].fabric)
        struct = info._obj
        self._fabric_into(h, struct)
        struct.cliqueId = self.gpus[h].fabric[2]
        return real.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfo_v4(self, h, info):
        """v4 lists cliques (type, id): the unicast pointer clique is the v3 cliqueId."""
        self._supported(h, "fabric", self.gpus[h].fabric if self.gpus[h].fabric_v4 else None)
        struct = info._obj
        self._fabric_into(h, struct)
        struct.cliques[0].type, struct.cliques[0].id = real.NVML_GPU_FABRIC_CLIQUE_TYPE_MULTICAST_POINTER, 7
        struct.cliques[1].type = real.NVML_GPU_FABRIC_CLIQUE_TYPE_UNICAST_POINTER
        struct.cliques[1].id, struct.numCliques = self.gpus[h].fabric[2], 2
        return real.NVML_SUCCESS

    def nvmlDeviceGetFieldValues(self, h, fields):
        """The recovery action (a uint) and the GPU's `fields` (uint64); NOT_SUPPORTED per field otherwise."""
        known = dict(self.gpus[h].fields)
        if self.gpus[h].recovery_action is not None:
            known[real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION] = self.gpus[h].recovery_action
        self._check(h, "fields")
        if not known:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return [types.SimpleNamespace(fieldId=f, valueType=1 if f == real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION else 3,
                                      nvmlReturn=real.NVML_SUCCESS if f in known else real.NVML_ERROR_NOT_SUPPORTED,
                                      value=types.SimpleNamespace(uiVal=known.get(f, 0), ullVal=known.get(f, 0)))
                for f in fields]

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        thresholds = self._supported(h, "thresholds", self.gpus[h].thresholds or None)
        if kind not in thresholds:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return thresholds[kind]

    def nvmlDeviceGetRowRemapperHistogram(self, h):
        values = self._supported(h, "histogram", self.gpus[h].histogram)
        return types.SimpleNamespace(**dict(zip(("max", "high", "partial", "low", "none"), values)))

    def nvmlDeviceGetUnrepairableMemoryFlag_v1(self, h):
        return self._supported(h, "unrepairable", self.gpus[h].unrepairable)

    def nvmlDeviceValidateInforom(self, h):
        if self.gpus[h].inforom_error is not None:
            raise real.NVMLError(self.gpus[h].inforom_error)
        return None

    def nvmlDeviceGetVbiosVersion(self, h):
        return self._supported(h, "vbios", self.gpus[h].vbios)

    def nvmlDeviceGetComputeMode(self, h):
        return self._supported(h, "compute_mode", self.gpus[h].compute_mode)

    def nvmlDeviceGetVirtualizationMode(self, h):
        return self._supported(h, "virtualization", self.gpus[h].virtualization)

    def nvmlSystemGetConfComputeState(self):
        return types.SimpleNamespace(ccFeature=getattr(self, "cc_feature", real.NVML_CC_SYSTEM_FEATURE_DISABLED))

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[h].processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[h].graphics]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.gpus[h].mps_clients]

    @staticmethod
    def _next(values: list, idle: Any) -> Any:
        """The next of successive answers; the last one stays."""
        return values.pop(0) if len(values) > 1 else (values[0] if values else idle)

    def nvmlDeviceGetUtilizationRates(self, h):
        g = self.gpus[h]
        return types.SimpleNamespace(gpu=self._next(g.utilization, 0), memory=self._next(g.memory_utilization, 0))

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        g = self.gpus[h]
        tx, rx = g.pcie_kb_s[0] if g.pcie_kb_s else (0, 0)
        if counter == real.NVML_PCIE_UTIL_RX_BYTES:  # a sample is read tx then rx: the next one after rx
            self._next(g.pcie_kb_s, None)
            return rx
        return tx

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlEventSetCreate(self):
        self.event_queue: list[tuple[int, ...]] = getattr(self, "event_queue", [])
        self.registered: list[int] = []
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h, kinds, event_set):
        self._check(h, "events")
        self.registered.append(h)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if self.event_queue:  # (GPU, Xid) or (GPU, Xid, GPU instance, compute instance): 0xFFFFFFFF without MIG
            h, xid, gi, ci = (*self.event_queue.pop(0), 0xFFFFFFFF, 0xFFFFFFFF)[:4]
            return types.SimpleNamespace(device=h, eventType=real.nvmlEventTypeXidCriticalError, eventData=xid,
                                         gpuInstanceId=gi, computeInstanceId=ci)
        import time
        time.sleep(min(timeout_ms, 50) / 1000)
        raise real.NVMLError(real.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set):
        self.calls.append(("event_set_free", -1, ()))

    # ---- settings -------------------------------------------------------------------------------------------------

    def _set(self, what: str, h: int, *args: Any) -> None:
        self._check(h, what)
        self.calls.append((what, h, args))

    def nvmlDeviceSetApplicationsClocks(self, h, mem, sm):
        self._set("set_app", h, mem, sm)

    def nvmlDeviceResetApplicationsClocks(self, h):
        self._set("reset_app", h)

    def nvmlDeviceSetGpuLockedClocks(self, h, low, high):
        self._set("lock_sm", h, low, high)

    def nvmlDeviceResetGpuLockedClocks(self, h):
        self._set("unlock_sm", h)

    def nvmlDeviceSetMemoryLockedClocks(self, h, low, high):
        self._set("lock_mem", h, low, high)

    def nvmlDeviceResetMemoryLockedClocks(self, h):
        self._set("unlock_mem", h)

    def nvmlDeviceSetPersistenceMode(self, h, mode):
        self._set("persistence", h, mode)


def install(monkeypatch: Any, fake: FakeNvml) -> FakeNvml:
    """Make `import pynvml` find the fake for the rest of the test."""
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


BUSES = ["0001", "0002", "0003", "0008", "0009", "000A", "000B", "000C"]  # Standard_ND96isr_H100_v5, ndv5-topo.xml


def h100_node(changes: dict[int, dict[str, Any]] | None = None) -> FakeNvml:
    """Eight H100s at the bus ids of Standard_ND96isr_H100_v5; `changes`: fields to set, by GPU index."""
    gpus = [FakeGpu(f"0000{b}:00:00.0") for b in BUSES]
    for index, values in (changes or {}).items():
        for key, value in values.items():
            setattr(gpus[index], key, value)
    return FakeNvml(gpus)


class ForeignProcess:
    """A real process that is not the test's descendant (started through a shell that exits, so own_pids cannot
    take it for gpuval's), whose /proc/PID/comm is `comm`, truncated to 15 characters by the kernel as the MPS
    server's "nvidia-cuda-mps-server" is: another job's process as NVML would list it."""

    def __init__(self, comm: str, tmp_path: Path) -> None:
        code = f"import ctypes, time; ctypes.CDLL(None).prctl(15, {comm.encode()!r}, 0, 0, 0); time.sleep(60)"
        pidfile = tmp_path / f"{comm}.pid"
        subprocess.run(["sh", "-c", f'{sys.executable} -c "{code}" >/dev/null 2>&1 & echo $! > {pidfile}'],
                       check=True, timeout=30)
        self.pid = int(pidfile.read_text())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _comm(self.pid) != comm[:15]:
            time.sleep(0.05)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
