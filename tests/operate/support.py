"""Shared by the operate tests: a real health run on a recorded machine, healthy or with a fault."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpuval.node.recorded import recorded_data
from gpuval.results import read_results
from gpuval.results.model import Result
from tests.conftest import run_gpuval


def recorded_health(tmp_path: Path, ecc_errors: int = 0, name: str = "run",
                    kernel_log: list[str] | None = None) -> list[Result]:
    """The records of a real `gpuval health` run on the recorded ND96asr_v4 (A100) machine; with `ecc_errors`, GPU 3
    has that many uncorrectable ECC errors (a FAIL with fault code ECC_ERRORS); with `kernel_log`, these are its
    kernel log's lines (an Xid that fails: XID_ERROR)."""
    data = recorded_data("Standard_ND96asr_v4")
    if ecc_errors:
        data["gpus"][3]["ecc"] = {"volatile_uncorrected": ecc_errors}
    if kernel_log is not None:
        data["kernel_log"] = kernel_log
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    results = tmp_path / f"{name}.jsonl"
    proc = run_gpuval("health", "--recorded", str(machine), "--results", str(results), "--json")
    assert proc.returncode == (1 if ecc_errors or kernel_log else 0), proc.stderr
    return read_results(results)


def recorded_machine(tmp_path: Path, name: str, ecc_errors: int = 0, h2d_gbps: float | None = None,
                     kernel_log: bool = True) -> Path:
    """The recorded ND96asr_v4 (A100) as a YAML file with one fault: `ecc_errors` uncorrectable ECC errors on GPU 3
    (ECC_ERRORS, which --quick sees too), slow host copies (H2D_D2H_SLOW below AzNHC's 21 GB/s: only a full run
    measures them), or
    no kernel log (the Xid check cannot run: an ERROR verdict)."""
    data = recorded_data("Standard_ND96asr_v4")
    if ecc_errors:
        data["gpus"][3]["ecc"] = {"volatile_uncorrected": ecc_errors}
    if h2d_gbps is not None:
        data["measurements"]["h2d_gbps"] = h2d_gbps
    if not kernel_log:
        del data["kernel_log"]
    machine = tmp_path / f"{name}.yaml"
    machine.write_text(yaml.safe_dump(data))
    return machine


def scontrol(*args: str) -> None:
    """Run scontrol as an admin would (SLURM_CONF from the environment); a refusal fails the test."""
    subprocess.run(["scontrol", *args], check=True, capture_output=True)


