"""A fleet's records for the tests of `gpuval baseline learn`, built one way: the packaged ND96asr_v4 recording (8 x
A100 SXM4 40GB, superbench's and AML's published figures) run once through the real `gpuval health --recorded`
command line, then copied per node and scaled with small noise (benchmarks/learn_fleet.py). No GPU can run here: a
real health run on the recorded machine is the most real stand-in for a fleet's records."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from benchmarks.learn_fleet import fleet_lines, template_lines
from gpuval.baselines.learn_read import Reading
from gpuval.results.sink import parse_line
from tests.conftest import run_gpuval

A100 = "Standard_ND96asr_v4"
NO_IMDS = {"GPUVAL_IMDS_ENDPOINT": "http://127.0.0.1:9/metadata", "GPUVAL_SKU": ""}


@lru_cache(maxsize=4)
def recorded_run(recording: str = A100) -> tuple[str, ...]:
    """The JSON lines of one `gpuval health --recorded RECORDING --json` run (run once per test process)."""
    proc = run_gpuval("health", "--recorded", recording, "--json", env=NO_IMDS)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return tuple(template_lines(proc.stdout))


def fleet(nodes: int = 16, slow: dict[int, float] | None = None, **kwargs) -> list[str]:
    """`nodes` recorded nodes' records (n001 ..), node i at factor slow[i]: benchmarks.learn_fleet.fleet_lines."""
    return list(fleet_lines(list(recorded_run()), nodes, slow, **kwargs))


def write(path: Path, lines: Iterable[str]) -> Path:
    path.write_text("".join(lines))
    return path


def reading(lines: Iterable[str]) -> Reading:
    """What `gpuval baseline learn` reads from these lines (each parsed as the JSON Lines reader does)."""
    found = Reading()
    for line in lines:
        record, why = parse_line(line.encode())
        assert record is not None, why
        found.add(record)
    return found


def edit(lines: list[str], host: str, name: str, change) -> list[str]:
    """The lines with `change(record)` applied to host's record of check `name`."""
    out = []
    for line in lines:
        record = json.loads(line)
        if record["where"]["hostname"] == host and record["name"] == name:
            change(record)
            line = json.dumps(record) + "\n"
        out.append(line)
    return out
