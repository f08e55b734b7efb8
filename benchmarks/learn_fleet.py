"""A fleet's records for `gpuval baseline learn`, built from one real `gpuval health --recorded` run: each node a
copy of the run's records (its own host name, run id, record ids and time) whose every measured figure (each GPU's
row in details.gpus, each GPU pair's read and write, each HCA's ib_write_bw, the node's all_reduce busbw) is scaled
by the node's factor (1.0 healthy, 0.8 a node 20% slow) and by small noise per figure (a normal draw, 0.5% by
default), as healthy nodes of one model differ. The tests (tests/baselines/test_learn*.py, tests/cli/
test_baseline*.py) and benchmarks/learn_scale.py build their fleets here.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterable, Iterator

NOISE = 0.005  # healthy GPUs of one model read within a few tenths of a percent of each other (docs/baselines.md)
NODE_VALUES = ("nccl_allreduce_node", "nccl_ib_loopback")  # records whose value is the node's figure
# (a record's `metrics`, the slowest figure for `gpuval history`, are left as they were: no learning reads them)
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Scaler:
    """Scales a record's measured figures by a node's factor and noise drawn from `rng`."""

    def __init__(self, factor: float, rng: random.Random, noise: float = NOISE) -> None:
        self.factor, self.rng, self.noise = factor, rng, noise

    def __call__(self, value: float) -> float:
        return round(value * self.factor * (1 + self.rng.gauss(0.0, self.noise)), 3)

    def record(self, record: dict) -> None:
        """Every figure of one record, in place."""
        data = record.get("data") or {}
        details = data.get("details") or {}
        for row in details.get("gpus") or []:
            if isinstance(row, dict):
                for key, value in row.items():
                    if key != "index" and _number(value):
                        row[key] = self(value)
        for name in ("read_write_gbps", "bandwidth_gbps"):
            found = details.get(name)
            for key, value in (found.items() if isinstance(found, dict) else ()):
                found[key] = [self(v) if _number(v) else v for v in value] if isinstance(value, list) else \
                    (self(value) if _number(value) else value)
        if record.get("name") in NODE_VALUES and _number(data.get("value")):
            data["value"] = self(data["value"])


def node_lines(template: Iterable[str], host: str, at: datetime, factor: float = 1.0, *,
               rng: random.Random, noise: float = NOISE) -> list[str]:
    """One node's run: the template's JSON lines as this node's records (new ids, one run id), scaled."""
    run = at.strftime("%Y%m%dT%H%M%SZ") + "-" + f"{rng.getrandbits(24):06x}"
    scale = Scaler(factor, rng, noise)
    out = []
    for line in template:
        record = json.loads(line)
        record.update(id=uuid.UUID(int=rng.getrandbits(128)).hex, run_id=run, started_at=at.isoformat(),
                      finished_at=(at + timedelta(seconds=1)).isoformat())
        record["where"]["hostname"] = host
        scale.record(record)
        out.append(json.dumps(record) + "\n")
    return out


def fleet_lines(template: list[str], nodes: int, slow: dict[int, float] | None = None, *, seed: int = 1,
                noise: float = NOISE, start: datetime = T0, prefix: str = "n") -> Iterator[str]:
    """`nodes` nodes' runs (n001, n002, ...), node i at factor slow[i] (1.0 where not named), one minute apart."""
    rng = random.Random(seed)
    width = max(3, len(str(nodes)))
    for i in range(nodes):
        at = start + timedelta(minutes=i)
        yield from node_lines(template, f"{prefix}{i + 1:0{width}d}", at, (slow or {}).get(i, 1.0), rng=rng,
                              noise=noise)


def template_lines(health_json: str) -> list[str]:
    """The records of a `gpuval health --json` run, one JSON line each."""
    return [json.dumps(record) + "\n" for record in json.loads(health_json)]
