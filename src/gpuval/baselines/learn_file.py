"""A learned baseline as a file: an ordinary `--baseline` file (sku:, gpu:, metrics: every band of kind `gpuval`
naming its method, each number with its source) with a `learned:` block that says how and from what it was
learned (the rule, the population, nodes and GPUs counted, run ids, dates, the nodes and figures left out and why,
each figure's centre and spread), and the drift from the file it replaces: per figure the old and new median, and
whether it moved beyond the noise (the medians' robust standard errors, the one z of baselines.noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from gpuval.baselines.files import read_user_files
from gpuval.baselines.learn import RULE, Figure, Learned
from gpuval.baselines.noise import OUTLIER_Z
from gpuval.errors import UsageError

SHOWN = 50  # values left out listed in the file; the rest are counted
# The standard error of a median of n normal values is sqrt(pi/2) sigma / sqrt(n): how far a fleet's median moves
# between two learnings by noise alone.
MEDIAN_SE = math.sqrt(math.pi / 2)


class _Plain(yaml.SafeDumper):
    """YAML with every value written out: gpuval's reader of a user's YAML refuses aliases (*name)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _g(value: float) -> float:
    """A figure as the file keeps it: six significant digits."""
    return float(f"{value:.6g}")


def provenance(learned: Learned, whole: bool = False) -> str:
    """What every number of the file says it comes from; `whole`: with the GPUs and the population too (the
    file's description)."""
    runs = sorted(learned.runs, key=lambda r: (learned.runs[r], r))
    first, last = learned.runs[runs[0]], learned.runs[runs[-1]]
    ids = runs[0] if len(runs) == 1 else f"{len(runs)} runs {runs[0]} .. {runs[-1]}"
    nodes = f"{len(learned.nodes)} nodes" + (f" ({learned.gpus} GPUs) of {learned.population.words()}" if whole
                                             else "")
    return f"learned by gpuval baseline learn from {nodes}, {ids}, {first:%Y-%m-%d} to {last:%Y-%m-%d}"


def _band(f: Figure, source: str) -> dict[str, Any]:
    measured = f"{f.noise.n} {f.per} figures" + (f" {f.measure.words()}" if f.measure.words() else "")
    band: dict[str, Any] = {"kind": "gpuval", "method": f.method, "unit": f.measure.unit}
    if f.measure.size_bytes:
        band["size_bytes"] = f.measure.size_bytes
    band.update(expected=_g(f.noise.center), expected_source=f"{source}: the median of {measured}")
    width = f"max({OUTLIER_Z:g} robust sigmas, 5%) = {f.noise.width:.3g} {f.measure.unit}"
    if f.warn_below is not None:
        band.update(warn_below=_g(f.warn_below), warn_source=f"{source}: the median less {width}")
    if f.fail_below is not None:
        band.update(fail_below=_g(f.fail_below), fail_source=f"{source}: the median less twice {width}")
    return band


def _figure_facts(f: Figure) -> dict[str, Any]:
    facts: dict[str, Any] = {"median": _g(f.noise.center), "sigma": _g(f.noise.sigma), "width": _g(f.noise.width),
                             "values": f.noise.n, "per": f.per, "nodes": f.nodes, "method": f.method}
    for key in ("size_bytes", "ranks", "seconds"):
        if getattr(f.measure, key):
            facts[key] = getattr(f.measure, key)
    return facts


def document(learned: Learned, at: datetime, version: str, versions: dict[str, int], older: int,
             drift: list[Drift] | None = None) -> dict[str, Any]:
    """The file's content: the baseline, and how and from what it was learned."""
    source = provenance(learned)
    pop = learned.population
    runs = sorted(learned.runs, key=lambda r: (learned.runs[r], r))
    block: dict[str, Any] = {
        "by": f"gpuval {version}", "at": at.isoformat(timespec="seconds"), "rule": RULE,
        "population": {"sku": pop.sku or None, "gpu_model": pop.gpu, "driver_branch": pop.driver,
                       "power_limit": pop.power},
        # the run ids as one string: a list of 8,192 would be 8,192 YAML nodes that every command reading the file
        # walks (half a second: gpuval's reader of a user's YAML checks each), one string is read at C speed
        "nodes": len(learned.nodes), "gpus": learned.gpus, "runs": " ".join(runs),
        "first": learned.runs[runs[0]].isoformat(timespec="seconds"),
        "last": learned.runs[runs[-1]].isoformat(timespec="seconds"),
        "measured_by": {f"gpuval {v}": n for v, n in sorted(versions.items())} or
        "not recorded (records of a gpuval that did not name its version)",
        "several_runs": f"each node's newest record of each check counts: {older} older records left out",
        "excluded": dict(sorted(learned.excluded.items())),
        "dropped": learned.dropped[:SHOWN] + ([f"and {len(learned.dropped) - SHOWN} more"]
                                             if len(learned.dropped) > SHOWN else []),
        "other_populations": learned.others,
        "figures": {f.measure.metric: _figure_facts(f) for f in learned.figures},
    }
    if drift is not None:
        block["drift"] = {d.metric: d.facts() for d in drift}
    out: dict[str, Any] = {"sku": pop.sku or f"{pop.gpu} (no SKU)"}
    if learned.model is not None:
        out["gpu"] = learned.model.key
    out["description"] = provenance(learned, whole=True)
    out["learned"] = block
    out["metrics"] = {f.measure.metric: _band(f, source) for f in learned.figures}
    out["left_out"] = dict(sorted(learned.left_out.items()))
    return out


def render(content: dict[str, Any]) -> str:
    """The file's text: a heading comment, then the YAML (no aliases, every value written out)."""
    head = ("# A site baseline learned by `gpuval baseline learn` from gpuval's own records: an ordinary --baseline\n"
            "# file (docs/baselines.md). Learn again with the same --output to see the drift.\n")
    return head + yaml.dump(content, Dumper=_Plain, sort_keys=False, allow_unicode=False, width=120)


@dataclass(frozen=True)
class Previous:
    """A file learned before: where, its population and each figure's median, spread and count."""

    path: str
    sku: str
    gpu: str
    at: str
    figures: dict[str, tuple[float, float, int]]


def previous(path: Path) -> Previous | None:
    """The learned file at `path` (None: there is none); UsageError where a file there is no learned baseline (it
    is not overwritten)."""

    if not path.exists():
        return None
    (where, data), = read_user_files([path])
    block = data.get("learned")
    if not isinstance(block, dict) or not isinstance(block.get("figures"), dict):
        raise UsageError(f"{path}: exists and is no baseline learned by gpuval baseline learn: not overwritten "
                         "(give another --output)")
    pop = block.get("population") if isinstance(block.get("population"), dict) else {}
    figures = {}
    for metric, facts in block["figures"].items():
        numbers = [facts.get(k) if isinstance(facts, dict) else None for k in ("median", "sigma", "values")]
        if all(isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) for n in numbers):
            figures[str(metric)] = (float(numbers[0]), float(numbers[1]), int(numbers[2]))
    return Previous(where, str(pop.get("sku") or ""), str(pop.get("gpu_model") or ""), str(block.get("at", "")),
                    figures)


def same_kind(before: Previous, learned: Learned) -> None:
    """A learned file is replaced only by one of its own SKU and GPU model (a driver or power limit may differ: the
    drift says what moved); UsageError else, and nothing is written."""
    pop = learned.population
    if (before.sku or "", before.gpu) != (pop.sku or "", pop.gpu):
        raise UsageError(f"{before.path}: learned from {before.sku or 'no SKU'}, {before.gpu}; these records are "
                         f"{pop.sku or 'no SKU'}, {pop.gpu}: not overwritten (give another --output)")


@dataclass(frozen=True)
class Drift:
    """One figure's median then and now, and whether it moved beyond the noise."""

    metric: str
    unit: str
    old: float | None
    new: float | None
    z: float | None

    @property
    def moved(self) -> bool:
        return self.z is not None and self.z > OUTLIER_Z

    @property
    def change_pct(self) -> float | None:
        if self.old is None or self.new is None or not self.old:
            return None
        return (self.new - self.old) / self.old * 100

    def words(self) -> str:
        if self.old is None:
            return "new"
        if self.new is None:
            return "no longer learned"
        return (f"moved beyond the noise (z {self.z:.1f} > {OUTLIER_Z:g})" if self.moved
                else f"within the noise (z {self.z:.1f})")  # inf prints as "inf": both spreads 0

    def facts(self) -> dict[str, Any]:
        z = None if self.z is None else round(self.z, 2) if math.isfinite(self.z) else "no noise to hide in"
        return {"old": self.old, "new": self.new, "change_pct": None if self.change_pct is None else
                round(self.change_pct, 2), "z": z, "verdict": self.words()}


def _se(sigma: float, n: int) -> float:
    return MEDIAN_SE * sigma / math.sqrt(max(n, 1))


def drift(before: Previous, learned: Learned) -> list[Drift]:
    """Each figure's median against the previous file's: moved where the difference is more than OUTLIER_Z
    standard errors of the two medians (a difference with no noise to hide in, both spreads 0, moved)."""
    now = {f.measure.metric: f for f in learned.figures}
    out = []
    for metric in sorted(set(now) | set(before.figures)):
        f, old = now.get(metric), before.figures.get(metric)
        unit = f.measure.unit if f else ""
        if f is None or old is None:
            out.append(Drift(metric, unit, old[0] if old else None, f.noise.center if f else None, None))
            continue
        gap = abs(f.noise.center - old[0])
        se = math.hypot(_se(f.noise.sigma, f.noise.n), _se(old[1], old[2]))
        z = gap / se if se else (0.0 if gap == 0 else math.inf)
        out.append(Drift(metric, unit, old[0], f.noise.center, z))
    return out
