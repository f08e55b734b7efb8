"""What a band's figures are, machine-readable, so a band judges only a figure measured the same way.

Every packaged band says its `kind`:

- `gpuval`: measured by gpuval's own check on named hardware (the source names the run), by the `method` named;
- `same_method`: another program's figure measured the way gpuval measures it (`method`: the same operation, size,
  timing and figure: nvbandwidth's copy-engine copies, nccl-tests' all_reduce busbw, perftest's ib_write_bw);
- `derived`: carried from another band of the same file (`derived_from`) by the rule its source states (a host
  link shared by two GPUs, a busbw held at every node count);
- `limit`: no measurement of speed: a count, link or setting from a datasheet or the SKU's definition, a counter
  threshold from a vendor's guide, a configuration requirement, a policy on a ratio of one run's own figures.

A figure from another program measured another way (a CUTLASS or bandwidthTest figure, BabelStream's triad, a
torch matmul timed otherwise) has no kind: it is left out of the files with the reason (`left_out`), never judged.
A user's file may leave `kind` out (its figures are the user's own); when it names one, it is checked the same way.
The methods are `_methods.yaml`: how gpuval measures each figure a measured band judges.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from gpuval.baselines.gpu_models import safe_load
from gpuval.errors import UsageError

MEASURED = ("gpuval", "same_method")
KINDS = (*MEASURED, "derived", "limit")


@dataclass(frozen=True)
class Method:
    """How gpuval measures some figures: the program, the shape and the duration, and the metrics it measures."""

    name: str
    metrics: tuple[str, ...]
    program: str
    shape: str
    duration: str

    def measures(self, metric: str) -> bool:
        """Whether this method measures `metric` (a pattern such as allreduce_busbw_*node_gbps counts)."""
        return any(fnmatch.fnmatchcase(metric, pattern) for pattern in self.metrics)


@lru_cache(maxsize=1)
def methods() -> dict[str, Method]:
    """Every method gpuval measures by, by name (`_methods.yaml`)."""
    data = safe_load((resources.files("gpuval.baselines") / "_methods.yaml").read_text())
    return {name: Method(name, tuple(m["metrics"]), m["program"], m["shape"], m["duration"])
            for name, m in data.items()}


def check_kind(metric: str, band: dict[str, Any], where: str, siblings: dict[str, Any]) -> None:
    """A band's kind, method and origin are ones gpuval knows and fit its metric (UsageError, one line, else):
    a measured band names a method that measures this metric, a derived band a measured band beside it."""
    kind = band.get("kind")
    if kind is None:
        return
    if kind not in KINDS:
        raise UsageError(f"{where}: metric {metric}: kind {kind!r} is none of {', '.join(KINDS)}")
    if kind in MEASURED:
        method = methods().get(str(band.get("method")))
        if method is None:
            raise UsageError(f"{where}: metric {metric}: a {kind} band names its method (method: one of "
                             f"{', '.join(methods())})")
        if not method.measures(metric):
            raise UsageError(f"{where}: metric {metric}: method {method.name} measures "
                             f"{', '.join(method.metrics)}, another figure: not the same measurement")
    elif band.get("method"):
        raise UsageError(f"{where}: metric {metric}: a {kind} band names no method (only a measured one does)")
    if kind == "derived":
        origin = siblings.get(str(band.get("derived_from")))
        if not isinstance(origin, dict) or origin.get("kind") not in MEASURED:
            raise UsageError(f"{where}: metric {metric}: a derived band names the measured band of its file it comes "
                             "from (derived_from: METRIC)")
    elif band.get("derived_from"):
        raise UsageError(f"{where}: metric {metric}: derived_from belongs to a derived band")
