"""Installs the torch stand-in (tests/helpers/fake_torch) for a test: in this process (sys.modules) and, through
PYTHONPATH and GPUVAL_FAKE_TORCH, in every child process the code under test starts."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

FOLDER = Path(__file__).resolve().parents[2] / "helpers" / "fake_torch"
H100_BUSES = ["0001", "0002", "0003", "0008", "0009", "000a", "000b", "000c"]  # the recorded ND96isr_H100_v5


def h100_devices(**per_gpu: dict[int, Any]) -> list[dict[str, Any]]:
    """The recorded H100 node's GPUs as CUDA sees them (NVML order; UUIDs as the recording's without "GPU-"),
    healthy figures, then `per_gpu` overrides by NVML index, e.g. h2d={5: 12.0}."""
    devices = [{"bus": f"{b}:00:00.0", "uuid": f"recorded-ndv5-{i}", "h2d": 50.0, "d2h": 51.0, "tflops": 700.0,
                "hbm": 3000.0, "peer": 370.0, "read": 371.0} for i, b in enumerate(H100_BUSES)]
    for key, values in per_gpu.items():
        for index, value in values.items():
            devices[index][key] = value
    return devices


def install(monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> ModuleType:
    """The stand-in as `torch` here and in child processes, answering from `config`."""
    monkeypatch.setenv("GPUVAL_FAKE_TORCH", json.dumps(config))
    # no empty entry: it would put the working folder on every child's path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FOLDER), os.environ.get("PYTHONPATH")])))
    spec = importlib.util.spec_from_file_location("torch", FOLDER / "torch" / "__init__.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "torch", module)
    return module
