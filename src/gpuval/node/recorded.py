"""Recorded machine descriptions (YAML): real nodes as NVML and sysfs described them, for tests and demos.

The package ships Standard_ND96asr_v4 and Standard_ND96isr_H100_v5, the H200 VM of gpuval's first real-GPU run
(h200-vm, h200-vm-busy) and a bare-metal HGX H100 8-GPU node off Azure (hgx-h100-8gpu, and hgx-h100-8gpu-ib with an
InfiniBand HCA per GPU), each with its sources inside. A recording is
plain data: tests change a field (an ECC count, a port state) to see each check's verdicts on an otherwise real
node, and `gpuval health --recorded FILE` judges a description someone saved elsewhere.

A GPU entry with `lost: true` (and its pci_bus_id, `error`) is a GPU NVML can no longer open (Xid 79); one with
`not_ours: true` is another job's (NVML: no permission). `nccl_topology` names the NCCL topology file the node
ships (packaged beside the recordings, or a path), as NCCL_TOPO_FILE names it on the node.

What else ran on the GPUs is a top-level `processes:` list of {gpu, pid, name, used_memory_mib, kind} (processes
other than gpuval's; kind compute, graphics, mps_server or mps_client), with `gpu_load: {GPU index: {gpu_pct_mean,
gpu_pct_min, memory_pct_mean, memory_pct_min, pcie_mb_s_mean, pcie_mb_s_min, memory_used_mib}}` for each GPU's load
(`gpu_utilization_pct: {GPU index: percent}` says the SM utilization alone, mean and lowest alike) and
`pid_namespace: own` where gpuval ran in a PID namespace of its own (NVML's pids are the host's); `cuda_start:` is
what cuInit said ({devices: N}, or {error_code, error, env}).
`based_on: NAME` makes a recording of the same machine at another moment out of only what differs.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import fields, is_dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from gpuval.errors import UsageError
from gpuval.node.cpus import parse_cpulist
from gpuval.node.imex import ImexHost
from gpuval.node.kernel_log import in_window, parse_line
from gpuval.node.machine import (
    ClockEventCounters, Clocks, CudaStart, EccCounts, FabricHealth, FabricInfo, FabricManager, Gpu, GpuActivity,
    GpuInventory, GpuLoad, GpuProcess, HardwareUnavailable, IbPort, LogLine, LogWindow, MigDevice, NoGpuDriver,
    NotRecorded, NumaNode, NvlinkErrors, PcieLink, PowerLimits, RemapHistogram, ResourceLimits, RowRemap, Temperatures,
    ToolMissing, XidEvent,
)
from gpuval.node.nccl_topo import NcclTopology, normalize_bus_id, parse_topology
from gpuval.node.yaml_input import read_yaml

_NESTED = {"ecc": EccCounts, "row_remap": RowRemap, "clocks": Clocks, "pcie": PcieLink, "power": PowerLimits,
           "fabric": FabricInfo, "remap_histogram": RemapHistogram, "clock_event_counters": ClockEventCounters,
           "temperature": Temperatures}


def recorded_names() -> list[str]:
    """SKUs with a recording in the package."""
    folder = resources.files("gpuval.node") / "recorded"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def recorded_data(name: str) -> dict[str, Any]:
    """The raw data of a packaged recording (by SKU, case and 'Standard_' optional) or of a YAML file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    else:
        wanted = name.lower().removeprefix("standard_")
        match = [n for n in recorded_names() if n.lower().removeprefix("standard_") == wanted]
        if not match:
            raise UsageError(f"no recorded machine {name!r}: known ones are {', '.join(recorded_names())}, "
                             "or give a YAML file")
        text = (resources.files("gpuval.node") / "recorded" / f"{match[0]}.yaml").read_text()
    data = read_yaml(text, name)
    if isinstance(data, dict) and data.get("based_on"):
        data = _based_on(data)
    if not isinstance(data, dict) or "gpus" not in data:
        raise UsageError(f"{name}: not a recorded machine (it needs at least a 'gpus' list)")
    return data


def _based_on(data: dict[str, Any]) -> dict[str, Any]:
    """A recording that names another (`based_on`: the same machine at another moment) and says only what
    differs: its keys replace the other's, its `measurements` replace figure by figure."""
    base = recorded_data(str(data["based_on"]))
    merged = {**base, **{k: v for k, v in data.items() if k != "based_on"}}
    merged["measurements"] = {**(base.get("measurements") or {}), **(data.get("measurements") or {})}
    return merged


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return cls(**values)


def _gpu(values: dict[str, Any], cpus_of: dict[int, list[int]], where: str) -> Gpu:
    values = copy.deepcopy(values)
    if values.get("lost") or values.get("not_ours"):  # NVML cannot open it: nothing but where it is, and why
        values.setdefault("error", "NVML says GPU is lost" if values.get("lost") else "NVML says Insufficient "
                          "Permissions")
        return _build(Gpu, {k: v for k, v in values.items() if k in ("index", "pci_bus_id", "lost", "error",
                                                                    "numa_node", "name", "uuid")}, where)
    if isinstance(values.get("fabric"), dict) and isinstance(values["fabric"].get("health"), dict):
        values["fabric"]["health"] = _build(FabricHealth, values["fabric"]["health"], f"{where}.fabric.health")
    for key, cls in _NESTED.items():
        if isinstance(values.get(key), dict):
            values[key] = _build(cls, values[key], f"{where}.{key}")
    if isinstance(values.get("nvlink_errors"), list):
        values["nvlink_errors"] = [_build(NvlinkErrors, {"link": i, **e}, f"{where}.nvlink_errors[{i}]")
                                   for i, e in enumerate(values["nvlink_errors"])]
    if isinstance(values.get("mig_devices"), list):
        values["mig_devices"] = [_build(MigDevice, d, f"{where}.mig_devices[{i}]")
                                 for i, d in enumerate(values["mig_devices"])]
    if not values.get("cpus") and values.get("numa_node") in cpus_of:
        values["cpus"] = cpus_of[values["numa_node"]]
    elif isinstance(values.get("cpus"), str):
        values["cpus"] = parse_cpulist(values["cpus"])
    values.setdefault("name", "NVIDIA GPU")
    values.setdefault("uuid", f"GPU-recorded-{values.get('index')}")
    return _build(Gpu, values, where)


def _merge(defaults: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(defaults)
    for key, value in item.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class RecordedMachine:
    """A Machine whose answers come from a recording; `measurements` stand in for the GPU benchmarks."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.description = str(data.get("description") or data.get("sku") or "recorded machine")
        self.sku: str | None = data.get("sku")
        self.measurements: dict[str, float] = dict(data.get("measurements") or {})

    @classmethod
    def load(cls, name: str) -> "RecordedMachine":
        """A packaged recording by SKU, or a YAML file."""
        return cls(recorded_data(name))

    def numa_nodes(self) -> list[NumaNode]:
        """The recording's NUMA nodes; NotRecorded where it says nothing of them (a capture of the GPUs alone)."""
        if "numa_nodes" not in self.data:
            raise NotRecorded(f"{self.description} has no NUMA nodes recorded")
        return self._numa()

    def _numa(self) -> list[NumaNode]:
        return [NumaNode(id=int(n["id"]), cpus=parse_cpulist(str(n["cpus"])),
                         cores=[parse_cpulist(str(c)) for c in n["cores"]] if n.get("cores") else None)
                for n in self.data.get("numa_nodes", [])]

    def gpu_inventory(self) -> GpuInventory:
        if not self.data.get("driver_version"):
            raise NoGpuDriver(f"no NVIDIA driver on {self.description}")
        cpus_of = {n.id: n.cpus for n in self._numa()}
        defaults = self.data.get("gpu_defaults") or {}
        inventory = GpuInventory(driver_version=str(self.data["driver_version"]),
                                 cuda_version=self.data.get("cuda_version"), gpus=[],
                                 confidential_compute=self.data.get("confidential_compute"))
        for i, entry in enumerate(self.data["gpus"]):
            kept = entry if entry.get("lost") or entry.get("not_ours") else _merge(defaults, entry)
            gpu = _gpu(kept, cpus_of, f"gpus[{i}]")
            kind = inventory.lost if gpu.lost else inventory.not_ours if entry.get("not_ours") else inventory.gpus
            kind.append(gpu)
        return inventory

    def nvidia_driver(self) -> str | None:
        """The recorded driver version: a node with a lost GPU still has its driver loaded."""
        return str(self.data["driver_version"]) if self.data.get("driver_version") else None

    def nccl_topology(self) -> NcclTopology | None:
        """The recording's NCCL topology file (packaged beside the recordings, or a path)."""
        name = self.data.get("nccl_topology")
        if not name:
            return None
        packaged = resources.files("gpuval.node") / "recorded" / str(name)
        try:
            text = packaged.read_text() if packaged.is_file() else Path(str(name)).read_text()
        except OSError as exc:
            raise UsageError(f"{self.description}: cannot read its NCCL topology {name} ({exc.strerror})") from None
        return parse_topology(text, f"NCCL_TOPO_FILE={name}")

    def ib_ports(self) -> list[IbPort]:
        defaults = self.data.get("ib_port_defaults") or {}
        return [_build(IbPort, _merge(defaults, p), f"ib_ports[{i}]") for i, p in enumerate(self.data.get("ib_ports", []))]

    def rdma_device_files(self) -> list[str]:
        return list(self.data.get("rdma_device_files") or [])

    def container_markers(self) -> list[str]:
        """The recording's `container_markers` (what showed it ran in a container); none for a host."""
        return list(self.data.get("container_markers") or [])

    def kernel_log(self) -> list[str]:
        return [line.text for line in self._log("kernel_log", "kernel log", HardwareUnavailable)]

    # ---- logs with times, events, services: recorded as they were read ------------------------------------------

    def _recorded(self, key: str, what: str) -> Any:
        if self.data.get(key) is None:
            raise NotRecorded(f"{self.description} has no {what} recorded")
        return self.data[key]

    def now(self) -> datetime:
        """The moment of the recording (`now`), else the real now: a recording's windows are judged in its time."""
        return _time(self.data["now"]) if self.data.get("now") else datetime.now(timezone.utc)

    def boot_time(self) -> datetime:
        return _time(self._recorded("boot_time", "boot time"))

    def _log(self, key: str, what: str, missing: type[HardwareUnavailable] = NotRecorded) -> list[LogLine]:
        """Recorded lines: text as saved (dmesg -T, journalctl, syslog: their time is read from the text), or
        {at: ISO time, text: ...}."""
        if key not in self.data:
            raise missing(f"{self.description} has no {what} recorded")
        boot = _time(self.data["boot_time"]) if self.data.get("boot_time") else None
        return [LogLine(str(e["text"]), _time(e["at"]) if e.get("at") else None) if isinstance(e, dict)
                else parse_line(str(e), boot, self.now()) for e in self.data[key] or []]

    def kernel_messages(self, since: datetime | None) -> LogWindow:
        return LogWindow(in_window(self._log("kernel_log", "kernel log", HardwareUnavailable), since),
                         f"the kernel log of {self.description}", since)

    def link_events(self, since: datetime) -> LogWindow:
        return LogWindow(in_window(self._log("link_log", "syslog"), since), f"the syslog of {self.description}",
                         since)

    @contextlib.contextmanager
    def watch_xids(self) -> Iterator["RecordedXidWatch"]:
        if not self.data.get("driver_version"):
            raise NoGpuDriver(f"no NVIDIA driver on {self.description}")
        if "xid_events_during_run" not in self.data:
            raise NotRecorded(f"{self.description} has no run recorded to watch for Xid events")
        yield RecordedXidWatch([_build(XidEvent, e, f"xid_events_during_run[{i}]")
                                for i, e in enumerate(self.data.get("xid_events_during_run") or [])],
                               list(self.data.get("xid_watch_notes") or []))

    def fabric_manager(self) -> FabricManager:
        return _build(FabricManager, self._recorded("fabric_manager", "fabric manager state"), "fabric_manager")

    def imex(self) -> ImexHost:
        """The recorded `imex` mapping: service, installed, query and domain (nvidia-imex-ctl's answers as printed),
        channels, channel_major."""
        return _build(ImexHost, dict(self._recorded("imex", "IMEX state")), "imex")

    def cuda_attributes(self) -> dict[str, dict[str, int]]:
        return {normalize_bus_id(k): dict(v)
                for k, v in self._recorded("cuda_attributes", "CUDA device attributes").items()}

    def kernel_modules(self) -> set[str]:
        return set(self._recorded("kernel_modules", "kernel module list"))

    def kernel_release(self) -> str:
        return str(self._recorded("kernel_release", "kernel release"))

    def resource_limits(self) -> ResourceLimits:
        return _build(ResourceLimits, self._recorded("limits", "process limits"), "limits")

    def tool(self, name: str) -> str | None:
        recorded_tools = {"dcgmi": "dcgm_diag"}
        have = set(self.data.get("tools") or []) | {p for p in (self.data.get("perftest") or {})}
        have |= {t for t, key in recorded_tools.items() if self.data.get(key)}
        return f"(recorded) {name}" if name in have else None

    def perftest(self, program: str, hca: str, port: int, size: int, cuda_device: int | str | None,
                 numa_node: int | None) -> str:
        if self.tool(program) is None:
            raise ToolMissing(f"{program} is not installed on {self.description}")
        runs = (self.data.get("perftest") or {}).get(program) or {}
        if hca not in runs:
            raise NotRecorded(f"{self.description} has no {program} run through {hca} recorded")
        return str(runs[hca])

    def cuda_start(self) -> CudaStart:
        """What cuInit said on the recorded machine (`cuda_start`)."""
        return _build(CudaStart, self._recorded("cuda_start", "CUDA start-up"), "cuda_start")

    def gpu_activity(self, gpus: list[int]) -> GpuActivity:
        """The recording's `processes`, `gpu_load` (or `gpu_utilization_pct`) and `pid_namespace` on these GPUs
        (none recorded: an idle node, gpuval in the host's PID namespace)."""
        wanted = set(gpus)
        found = [_build(GpuProcess, p, f"processes[{i}]") for i, p in enumerate(self.data.get("processes") or [])]
        loads = {int(k): _build(GpuLoad, dict(v), f"gpu_load[{k}]")
                 for k, v in (self.data.get("gpu_load") or {}).items()}
        for k, v in (self.data.get("gpu_utilization_pct") or {}).items():
            loads.setdefault(int(k), GpuLoad(float(v), int(v)))
        return GpuActivity([p for p in found if p.gpu in wanted], {k: v for k, v in loads.items() if k in wanted},
                           self.data.get("pid_namespace", "host") != "own")

    def dcgm_diag(self, level: int) -> str:
        if self.tool("dcgmi") is None:
            raise ToolMissing(f"dcgmi is not installed on {self.description}")
        runs = self.data["dcgm_diag"]
        if level not in runs and str(level) not in runs:
            raise NotRecorded(f"{self.description} has no dcgmi diag -r {level} recorded")
        return str(runs.get(level, runs.get(str(level))))


class RecordedXidWatch:
    """The Xid events a recording says the driver reported during its run."""

    def __init__(self, events: list[XidEvent], notes: list[str]) -> None:
        self._events, self._notes = events, notes

    def events(self) -> list[XidEvent]:
        return list(self._events)

    def notes(self) -> list[str]:
        return list(self._notes)


def _time(value: Any) -> datetime:
    """A recorded time (ISO 8601, or a YAML timestamp); naive times are UTC."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)



def as_data(obj: Any) -> Any:
    """A dataclass tree as plain data (for JSON output and for writing recordings)."""
    if is_dataclass(obj):
        return {f.name: as_data(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list):
        return [as_data(v) for v in obj]
    if isinstance(obj, dict):
        return {k: as_data(v) for k, v in obj.items()}
    return obj
