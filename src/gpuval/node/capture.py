"""A machine as a recording: what a Machine answers, written in the form node/recorded.py reads, so a node's state at
a verdict can be judged again later (`gpuval health --recorded FILE`). A recorded machine is captured as its own
data (the same answers by construction); a live one through the Machine interface, each answer it cannot give left
out (the recording then says it has none: the check that reads it is not judged). `nvidia_smi_query` is the
`nvidia-smi -q` text where the tool is installed, for people and for node/nvidia_smi.py's reader."""

from __future__ import annotations

import copy
import shutil
import subprocess
from datetime import datetime
from typing import Any, Callable

from gpuval.node.machine import HardwareUnavailable, Machine
from gpuval.node.recorded import RecordedMachine, as_data

MAX_LOG_LINES = 2000  # kernel log lines kept: the slice around a fault, not the node's whole history
SMI_TIMEOUT_S = 30
MAX_SMI_CHARS = 512 * 1024  # nvidia-smi -q of 8 GPUs is ~60 kB


def _answer(ask: Callable[[], Any]) -> Any:
    """What the machine answers, or None where it cannot."""
    try:
        return ask()
    except (HardwareUnavailable, OSError, ValueError):
        return None


def _gpus(machine: Machine) -> dict[str, Any]:
    inventory = _answer(machine.gpu_inventory)
    if inventory is None:
        return {"gpus": []}
    gpus = [as_data(g) for g in inventory.gpus]
    gpus += [{"index": g.index, "pci_bus_id": g.pci_bus_id, "lost": True, "error": g.error} for g in inventory.lost]
    gpus += [{"index": g.index, "pci_bus_id": g.pci_bus_id, "not_ours": True, "error": g.error}
             for g in inventory.not_ours]
    return {"driver_version": inventory.driver_version, "cuda_version": inventory.cuda_version,
            "confidential_compute": inventory.confidential_compute, "gpus": gpus}


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def capture(machine: Machine, description: str, measurements: dict[str, Any] | None = None) -> dict[str, Any]:
    """The machine as recording data (node/recorded.py's form): a recording as it is; a live machine's GPUs, ports,
    NUMA nodes, kernel log (its last MAX_LOG_LINES lines, each with its time), limits, modules and the moment it
    was read; `measurements`: figures measured on it, as a recording names them."""
    if isinstance(machine, RecordedMachine):
        data = copy.deepcopy(machine.data)
        data.setdefault("now", _time(machine.now()))
        return data
    data: dict[str, Any] = {"description": description, "now": _time(_answer(machine.now)), **_gpus(machine)}
    log = _answer(lambda: machine.kernel_messages(None))
    if log is not None:
        data["kernel_log"] = [{"at": _time(line.at), "text": line.text} if line.at else line.text
                              for line in log.lines[-MAX_LOG_LINES:]]
    found: dict[str, Callable[[], Any]] = {
        "ib_ports": lambda: [as_data(p) for p in machine.ib_ports()],
        "numa_nodes": lambda: [{"id": n.id, "cpus": ",".join(map(str, n.cpus))} for n in machine.numa_nodes()],
        "rdma_device_files": machine.rdma_device_files, "container_markers": machine.container_markers,
        "boot_time": lambda: _time(machine.boot_time()), "kernel_release": machine.kernel_release,
        "kernel_modules": lambda: sorted(machine.kernel_modules()), "limits": lambda: as_data(machine.resource_limits()),
        "fabric_manager": lambda: as_data(machine.fabric_manager()),
    }
    for key, ask in found.items():
        value = _answer(ask)
        if value is not None:
            data[key] = value
    if measurements:
        data["measurements"] = dict(measurements)
    return data


def nvidia_smi_query(timeout_s: float = SMI_TIMEOUT_S) -> str | None:
    """`nvidia-smi -q` as it printed it (cut to MAX_SMI_CHARS), or None where nvidia-smi is not installed or
    does not answer."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout[:MAX_SMI_CHARS] if done.returncode == 0 else None
