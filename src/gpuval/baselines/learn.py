"""`gpuval baseline learn`: a site's own bands, learned from gpuval's records of its healthy nodes.

Pure: it takes what `learn_read` read and returns what was learned (`Learned`); `learn_file` writes it as an
ordinary baseline file. The rule, stated in the file it writes:

1. **One population.** Nodes are grouped by SKU, GPU model, driver branch and enforced power limit; one group is
   learned, never an average of several. A node whose GPUs are of different models or power limits is no member of
   any. Where more than one group has enough nodes, nothing is learned until the user names one.
2. **Impossible figures out.** A figure that is no finite number, zero or negative, or over IMPOSSIBLE x the
   datasheet peak of its GPU model (gpus/<model>.yaml `peak:`; healthy GPUs read 65-91% of it) is left out and
   named.
3. **Bad nodes out.** For each figure measured on enough nodes, THE robust rule (baselines.noise) over every value
   of the population (each GPU's, pair's, HCA's or node's): a node with a value beyond the median +- max(3.5 robust
   sigmas, 5%) is left out of everything, and named with that value, before any band is computed: a fleet with bad
   nodes does not learn them.
4. **The band.** Over the nodes kept: expected the median, warn under the median less max(3.5 robust sigmas, 5% of
   it), fail under twice that (the severities of noise.NoiseBand), each figure by the method of _methods.yaml that
   measures it, on at least `min_nodes` nodes (multi-node all_reduce: on MIN_RUNS runs). Every figure is higher-
   is-better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable

from gpuval.baselines.gpu_models import GpuIdentity, GpuModel, identify
from gpuval.baselines.kinds import methods
from gpuval.baselines.learn_read import (
    EXPECTED, NOT_LEARNED, Measure, MultiRun, NodeSeen, Reading, Values, no_cycle_collection,
)
from gpuval.baselines.model import finite
from gpuval.baselines.noise import OUTLIER_Z, RELATIVE_FLOOR, NoiseBand, band
from gpuval.errors import UsageError

MIN_NODES = 8
MIN_RUNS = 3  # a multi-node all_reduce is one figure per run: a centre and a spread need three
IMPOSSIBLE = 1.1  # x the datasheet peak: no GPU measures over its peak (healthy ones read 65-91% of it)
UNKNOWN = "unknown"
RULE = (f"per figure, over every GPU's (pair's, HCA's, node's) value on the nodes kept: expected the median; warn "
        f"under the median less max({OUTLIER_Z:g} robust sigmas, {RELATIVE_FLOOR * 100:g}% of it), fail under twice "
        "that (robust sigma 1.4826 x MAD: gpuval.baselines.noise, THE robust rule). Nodes with a value beyond the "
        "median +- that width of the whole population were left out first; so were figures that are no finite "
        f"number, zero or negative, or over {IMPOSSIBLE:g} x the GPU model's datasheet peak. Each node's newest "
        "record of each check counts.")


@dataclass(frozen=True, order=True)
class Population:
    """What nodes must share for their figures to be pooled: SKU, GPU model (NVML name), driver branch, the
    enforced power limit."""

    sku: str
    gpu: str
    driver: str
    power: str

    def words(self) -> str:
        driver = f"driver {self.driver}" if self.driver != UNKNOWN else "driver unknown"
        power = self.power if self.power != UNKNOWN else "power limit unknown"
        return f"{self.sku or 'no SKU'}, {self.gpu}, {driver}, {power}"


@dataclass(frozen=True)
class Choice:
    """Which population to learn (None: any), and how many nodes a figure needs."""

    sku: str | None = None
    gpu: str | None = None
    driver: str | None = None
    power_w: float | None = None
    min_nodes: int = MIN_NODES


@dataclass
class Figure:
    """One learned band: its measurement and method, the values' centre and spread, the lines, what it counted."""

    measure: Measure
    method: str
    noise: NoiseBand
    nodes: int
    per: str  # what one value is: "GPU", "GPU pair", "HCA", "node", "run"
    warn_below: float | None
    fail_below: float | None


@dataclass
class Learned:
    """What was learned from one population, and everything left out with the reason."""

    population: Population
    model: GpuModel | None
    figures: list[Figure] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # metric -> why no band
    excluded: dict[str, str] = field(default_factory=dict)  # node -> why its figures were left out
    dropped: list[str] = field(default_factory=list)  # values left out: "n3 GPU 2 gemm_fp16_tflops nan: ..."
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0
    runs: dict[str, datetime] = field(default_factory=dict)
    others: list[str] = field(default_factory=list)  # other populations, left out


def branch(driver: str | None) -> str:
    """A driver's branch: "470" of "470.103.01"."""
    head = (driver or "").split(".")[0].strip()
    return head if head.isdigit() else UNKNOWN


def membership(node: NodeSeen) -> Population | str:
    """The population of a node, or why it belongs to none (GPUs of different models or power limits)."""
    models = node.fact("gpu_count")
    if models and len(models) > 1:
        return f"GPUs of different models ({', '.join(models)})"
    power = node.fact("power_limit")
    if power and len(power) > 1:
        return f"GPUs at different power limits ({', '.join(f'{w:g}' for w in power)} W)"
    gpu = models[0] if models else node.gpu_name or "unknown GPU"
    return Population(node.sku or "", gpu, branch(node.fact("driver")), f"{power[0]:g} W" if power else UNKNOWN)


def model_of(population: Population) -> GpuModel | None:
    """The packaged GPU model of a population's NVML name (None: gpuval has no model of that name)."""
    return identify(GpuIdentity(name=population.gpu))[0]


def _chosen(population: Population, choice: Choice) -> bool:
    model = model_of(population)
    return ((choice.sku is None or population.sku.lower() == choice.sku.lower())
            and (choice.gpu is None or choice.gpu.lower() in (population.gpu.lower(), model.key if model else ""))
            and (choice.driver is None or population.driver == choice.driver)
            and (choice.power_w is None or population.power == f"{choice.power_w:g} W"))


def choose(reading: Reading, choice: Choice) -> tuple[Population, list[NodeSeen], dict[str, str], list[str]]:
    """The one population to learn, its nodes, the nodes that belong to none (and why) and the other populations
    (in words, with their nodes counted); UsageError where none or several have enough nodes."""
    groups: dict[Population, list[NodeSeen]] = {}
    apart: dict[str, str] = {}
    for node in reading.nodes.values():
        member = membership(node)
        if isinstance(member, str):
            apart[node.host] = member
        elif _chosen(member, choice):
            groups.setdefault(member, []).append(node)
    ranked = sorted(groups.items(), key=lambda g: (-len(g[1]), g[0]))
    said = [f"{p.words()} ({len(n)} nodes)" for p, n in ranked]
    enough = [(p, n) for p, n in ranked if len(n) >= choice.min_nodes]
    if not enough:
        found = "; ".join(said[:5]) if said else "no node with a health record of its figures"
        raise UsageError(f"nothing can be learned: at least {choice.min_nodes} nodes of one SKU, GPU model, driver "
                         f"branch and power limit are needed (--min-nodes), found {found}")
    if len(enough) > 1:
        raise UsageError("records of several populations, never averaged: " + "; ".join(said[:len(enough)])
                         + ": learn one at a time (--sku, --gpu, --driver, --power-limit)")
    population, nodes = enough[0]
    return population, sorted(nodes, key=lambda n: n.host), apart, said[1:]


def _peak(model: GpuModel | None, metric: str) -> float | None:
    if model is None:
        return None
    if metric.startswith("gemm_sustained_"):  # a sustained load computes no faster than the burst's peak
        metric = metric.replace("gemm_sustained_", "gemm_")
    peak = model.peaks.get(metric)
    return peak.value if peak is not None else None


def why_bad(value: float, peak: float | None) -> str:
    """Why a figure cannot be a measurement ("" where it can)."""
    if not finite(value):
        return "not a finite number"
    if value <= 0:
        return "zero or negative"
    if peak is not None and value > IMPOSSIBLE * peak:
        return f"over {IMPOSSIBLE:g} x the datasheet peak {peak:g}"
    return ""


def _sound(nodes: list[NodeSeen], model: GpuModel | None, dropped: list[str]) -> dict[str, dict[Measure, Values]]:
    """Each node's figures with the impossible ones left out (each named in `dropped`)."""
    out: dict[str, dict[Measure, Values]] = {}
    for node in nodes:
        kept: dict[Measure, Values] = {}
        for measure, values in node.figures().items():
            peak = _peak(model, measure.metric)
            top = IMPOSSIBLE * peak if peak is not None else math.inf
            if math.isfinite(sum(values.value)) and min(values.value) > 0 and max(values.value) <= top:
                kept[measure] = values  # every one sound (a NaN or an infinity makes the sum no finite number)
                continue
            for who, value in values.pairs():
                why = why_bad(value, peak)
                if why:
                    shape = f" {measure.words()}" if measure.words() else ""
                    dropped.append(f"{node.host}{' ' + who if who else ''} {measure.metric} {value:g} "
                                   f"{measure.unit}{shape}: {why}")
                else:
                    kept.setdefault(measure, Values()).add(who, value)
        out[node.host] = kept
    return out


def _pooled(figures: dict[str, dict[Measure, Values]], measure: Measure, hosts: Iterable[str]) -> list[float]:
    pooled: list[float] = []
    for host in hosts:
        pooled.extend(figures[host][measure].value)
    return pooled


def outliers(figures: dict[str, dict[Measure, Values]], min_nodes: int) -> dict[str, str]:
    """The nodes with a value beyond the population's robust band (median +- max(3.5 robust sigmas, 5%)) of any
    figure measured on at least `min_nodes` nodes, each named with its value furthest from its band's median."""
    worst: dict[str, tuple[float, str]] = {}
    for measure in {m for f in figures.values() for m in f}:
        having = [h for h, f in figures.items() if measure in f]
        if len(having) < min_nodes:
            continue
        noise = band(_pooled(figures, measure, having))
        low, high = noise.center - noise.width, noise.center + noise.width
        for host in having:
            values = figures[host][measure]
            if low <= min(values.value) and max(values.value) <= high:
                continue
            who, value = max(values.pairs(), key=lambda wv: abs(wv[1] - noise.center))
            off = abs(value - noise.center) / noise.center
            if off > worst.get(host, (-1.0, ""))[0]:
                worst[host] = (off, f"{measure.metric}{' ' + who if who else ''} {value:g} {measure.unit}, "
                                    f"{(value - noise.center) / noise.center * 100:+.1f}% from the median "
                                    f"{noise.center:g} of the population (beyond max({OUTLIER_Z:g} robust sigmas "
                                    f"{noise.sigma:.3g}, {RELATIVE_FLOOR * 100:g}%))")
    return {host: why for host, (_, why) in worst.items()}


def _per(measure: Measure) -> str:
    if measure.nodes > 1:
        return "run"
    if measure.metric.startswith("p2p_"):
        return "GPU pair"
    if measure.metric.startswith("ib_write_bw"):
        return "HCA"
    if measure.metric.startswith(("allreduce_", "ib_loopback_")):
        return "node"
    return "GPU"


def figure(measure: Measure, values: list[float], nodes: int) -> Figure | str:
    """The band of one measurement's values (or why none: no method measures it)."""
    method = next((m.name for m in methods().values() if m.measures(measure.metric)), None)
    if method is None:
        return "no method of gpuval's (_methods.yaml) measures it"
    noise = band(values)
    warn, fail = noise.center - noise.width, noise.center - 2 * noise.width
    return Figure(measure, method, noise, nodes, _per(measure), warn if warn > 0 else None,
                  fail if fail > 0 else None)


def _bands(figures: dict[str, dict[Measure, Values]], choice: Choice, learned: Learned) -> None:
    """One band per metric, of the measurement most nodes made (the others are another measurement)."""
    by_metric: dict[str, dict[Measure, list[str]]] = {}
    for host, found in figures.items():
        for measure in found:
            by_metric.setdefault(measure.metric, {}).setdefault(measure, []).append(host)
    for metric, measures in sorted(by_metric.items()):
        best = max(measures, key=lambda m: (len(measures[m]), m.size_bytes or 0, m.ranks or 0))
        hosts = measures[best]
        others = sorted((m for m in measures if m != best), key=lambda m: (m.size_bytes or 0, m.ranks or 0))
        if len(hosts) < choice.min_nodes:
            learned.left_out[metric] = (f"measured on {len(hosts)} nodes {best.words()}".rstrip()
                                        + f", fewer than {choice.min_nodes} (--min-nodes)")
            continue
        made = figure(best, _pooled(figures, best, hosts), len(hosts))
        if isinstance(made, str):
            learned.left_out[metric] = made
            continue
        learned.figures.append(made)
        if others:
            shown = ", ".join(m.words() or "another shape" for m in others[:3]) + (", ..." if len(others) > 3 else "")
            learned.left_out[f"{metric} (other measurements)"] = (
                f"{len(others)} other sizes or shapes ({shown}): another measurement than the {len(hosts)} nodes' "
                f"{best.words()}, not pooled")


def _multi(runs: Iterable[MultiRun], kept: set[str], learned: Learned) -> None:
    """Bands of all_reduce over several nodes: one figure per run whose nodes are all kept members; runs beyond the
    runs' robust band are left out, named by run id."""
    by_measure: dict[Measure, list[MultiRun]] = {}
    for run in runs:
        if set(run.hosts) <= kept:
            for measure in run.figures:
                by_measure.setdefault(measure, []).append(run)
    by_metric: dict[str, tuple[Measure, list[MultiRun]]] = {}
    for measure, found in sorted(by_measure.items(), key=lambda mf: (len(mf[1]), mf[0].size_bytes or 0)):
        by_metric[measure.metric] = (measure, found)  # the most runs, then the largest size, last
    for metric, (measure, found) in sorted(by_metric.items()):
        noise = band([r.figures[measure] for r in found])
        good = [r for r in found if abs(r.figures[measure] - noise.center) <= noise.width]
        for r in found:
            if r not in good:
                learned.excluded[f"run {r.run_id}"] = f"{metric} {r.figures[measure]:g} GB/s beyond the runs' band"
        if len(good) < MIN_RUNS:
            learned.left_out[metric] = f"{len(good)} runs {measure.words()}, fewer than {MIN_RUNS}"
            continue
        made = figure(measure, [r.figures[measure] for r in good], len({h for r in good for h in r.hosts}))
        if isinstance(made, str):
            learned.left_out[metric] = made
            continue
        learned.figures.append(made)
        learned.runs.update({r.run_id: r.at for r in good})


def learn(reading: Reading, choice: Choice) -> Learned:
    """The bands of the one population `choice` leaves (UsageError: none or several; or nothing learned)."""
    with no_cycle_collection():
        return _learn(reading, choice)


def _learn(reading: Reading, choice: Choice) -> Learned:
    population, nodes, apart, others = choose(reading, choice)
    model = model_of(population)
    learned = Learned(population, model, others=others)
    figures = _sound(nodes, model, learned.dropped)
    learned.excluded = outliers(figures, choice.min_nodes)
    kept = {h: f for h, f in figures.items() if h not in learned.excluded and f}
    _bands(kept, choice, learned)
    _multi(reading.runs.values(), set(kept), learned)
    learned.excluded.update({h: why for h, why in apart.items()})
    if not learned.figures:
        why = "; ".join(f"{m}: {w}" for m, w in sorted(learned.left_out.items())) or "no figure measured"
        raise UsageError(f"nothing can be learned from {len(kept)} nodes of {population.words()}: {why}")
    learned.left_out.update(NOT_LEARNED)
    measured = {f.measure.metric for f in learned.figures} | {m.split()[0] for m in learned.left_out}
    learned.left_out.update({m: "not measured in these records" for m in EXPECTED if m not in measured})
    learned.nodes = sorted(kept)
    by_host = {n.host: n for n in nodes}
    learned.gpus = sum(by_host[h].gpus for h in kept)
    for host in kept:
        learned.runs.update(by_host[host].runs())
    return learned
