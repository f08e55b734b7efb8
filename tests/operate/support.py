"""Shared by the operate tests: a real health run on a recorded machine, healthy or with a fault."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuval.node.recorded import recorded_data
from gpuval.results import read_results
from gpuval.results.model import Result
from tests.conftest import run_gpuval


def recorded_health(tmp_path: Path, ecc_errors: int = 0, name: str = "run") -> list[Result]:
    """The records of a real `gpuval health` run on the recorded ND96asr_v4 (A100) machine; with `ecc_errors`, GPU 3
    has that many uncorrectable ECC errors (a FAIL with fault code ECC_ERRORS)."""
    data = recorded_data("Standard_ND96asr_v4")
    if ecc_errors:
        data["gpus"][3]["ecc"] = {"volatile_uncorrected": ecc_errors}
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    results = tmp_path / f"{name}.jsonl"
    proc = run_gpuval("health", "--recorded", str(machine), "--results", str(results), "--json")
    assert proc.returncode == (1 if ecc_errors else 0), proc.stderr
    return read_results(results)
