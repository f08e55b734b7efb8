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
from gpuval.node.recorded import RecordedMachine, recorded_data

A100 = "Standard_ND96asr_v4"
H100 = "Standard_ND96isr_H100_v5"


@pytest.fixture(autouse=True)
def no_imds(monkeypatch: pytest.MonkeyPatch) -> None:
    """SKU detection in tests asks a closed port on 127.0.0.1, never 169.254.169.254."""
    monkeypatch.setenv("GPUVAL_IMDS_ENDPOINT", "http://127.0.0.1:9/metadata")
    monkeypatch.delenv("GPUVAL_SKU", raising=False)


def machine(sku: str, change: Callable[[dict[str, Any]], None] | None = None) -> RecordedMachine:
    """A packaged recording, with `change` applied to its data (e.g. an ECC count)."""
    data = copy.deepcopy(recorded_data(sku))
    if change:
        change(data)
    return RecordedMachine(data)


def context(sku: str, change: Callable[[dict[str, Any]], None] | None = None, **kwargs: Any) -> CheckContext:
    """A check context on a (changed) recording, with its baseline and its recorded measurements."""
    m = machine(sku, change)
    ctx = make_context(m, kwargs.pop("sku", None), kwargs.pop("baselines", ()),
                       RecordedMeasurer(m.measurements, m.description), repeats=1)
    for key, value in kwargs.items():
        setattr(ctx, key, value)
    return ctx


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
