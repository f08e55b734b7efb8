"""Helpers for the health tests: recorded machines with one field changed, a context, no IMDS ever.

The recorded ND96asr_v4 and ND96isr_H100_v5 are built from published nvidia-smi / sysfs output (sources in the
YAML files): NVML cannot run without a GPU, so they are the most real stand-in for those nodes.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from gpuval.checks.base import CheckContext
from gpuval.checks.measure import RecordedMeasurer
from gpuval.checks.suite import make_context
from gpuval.node.machine import HardwareUnavailable
from gpuval.node.recorded import RecordedMachine, recorded_data
from gpuval.workloads.health.measurer import TorchMeasurer

A100 = "Standard_ND96asr_v4"
H100 = "Standard_ND96isr_H100_v5"


@pytest.fixture(autouse=True)
def no_imds(monkeypatch: pytest.MonkeyPatch) -> None:
    """SKU detection in tests asks a closed port on 127.0.0.1, never 169.254.169.254."""
    monkeypatch.setenv("GPUVAL_IMDS_ENDPOINT", "http://127.0.0.1:9/metadata")
    monkeypatch.delenv("GPUVAL_SKU", raising=False)


class PartlyUnreadable(RecordedMachine):
    """A recording where some parts cannot be read (`_unreadable: {method: why}`), as on a node where the kernel
    log, sysfs or NVML refuse to answer: the machine raises HardwareUnavailable for them, as the real one does."""

    def __getattribute__(self, name: str) -> Any:
        broken = object.__getattribute__(self, "data").get("_unreadable", {})
        if name in broken:
            def refuse(*_args: Any) -> Any:
                raise HardwareUnavailable(broken[name])
            return refuse
        return object.__getattribute__(self, name)


def machine(sku: str, change: Callable[[dict[str, Any]], None] | None = None) -> RecordedMachine:
    """A packaged recording, with `change` applied to its data (e.g. an ECC count)."""
    data = copy.deepcopy(recorded_data(sku))
    if change:
        change(data)
    return PartlyUnreadable(data) if "_unreadable" in data else RecordedMachine(data)


def context(sku: str, change: Callable[[dict[str, Any]], None] | None = None, **kwargs: Any) -> CheckContext:
    """A check context on a (changed) recording, with its baseline and its recorded measurements; a change that
    sets `_measure_with_torch` measures with the real TorchMeasurer instead (CPU-only torch here: it cannot)."""
    m = machine(sku, change)
    measurer = TorchMeasurer("test-run") if m.data.get("_measure_with_torch") else \
        RecordedMeasurer(m.measurements, m.description)
    ctx = make_context(m, kwargs.pop("sku", None), kwargs.pop("baselines", ()), measurer, repeats=1,
                       dcgm_level=m.data.get("_dcgm_level"))  # a change may ask for dcgmi diag (--dcgm)
    for key, value in kwargs.items():
        setattr(ctx, key, value)
    return ctx


def unreadable(method: str, why: str) -> Callable[[dict[str, Any]], None]:
    """A change: the machine cannot read `method` (gpu_inventory, kernel_log, ib_ports, numa_nodes)."""
    def apply(data: dict[str, Any]) -> None:
        data.setdefault("_unreadable", {})[method] = why
    return apply


def cpu_torch(data: dict[str, Any]) -> None:
    """A change: measure with torch as installed here (a CPU-only build) on this node that has GPUs."""
    data["_measure_with_torch"] = True


def gpu(index: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    """A change: set fields of one GPU (nested dicts merge with the defaults)."""
    def apply(data: dict[str, Any]) -> None:
        data["gpus"][index].update(copy.deepcopy(fields))
    return apply


def data_set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change: set data[a][b]... = value for 'a.b...' (list indices as numbers)."""
    def apply(data: dict[str, Any]) -> None:
        keys = path.split(".")
        node: Any = data
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return apply
