"""Each node against the fleet: the node suite's figures compared across the nodes of one GPU model.

Every node test runs the same health suite, so each figure it measures (burst GEMM per dtype, the sustained load,
HBM memcpy and triad, host copies alone and all at once, P2P reads, the node's own all_reduce, each HCA's write
bandwidth: each named by its band's metric and how it was measured, fleet/run/figures.py) is the same measurement on
every node of one GPU model. A node's figure is the mean of its values (its GPUs', GPU pairs', HCAs'). The fleet's
reference for a (GPU model, figure) is THE robust rule (baselines.noise.band, as it judges a node against a run's
other nodes in the diagnosis) over the figures of the nodes' first node suites, the tests that sample the fleet
without aiming at anyone (terms.CENTRE_PURPOSES, as weighing's centres): the median node, its robust sigma, and the
half-width max(RELATIVE_FLOOR: 5% of the median, OUTLIER_Z robust sigmas). A node more than that under the median is
slow in that figure: a fleet whose healthy nodes spread 2% is judged beyond 7%, a tight one beyond 5% (each reason
says which). The fleet's --cut is not used: it is the network's (busbw), and test rigs widen it to their CPU noise.

A node test slow in any figure fails (cause GPUS_SLOW) and its node suite runs again (rounds.py: one failure is
never a verdict); failing again convicts the node (GPUS_SLOW, drained as FLEET_NODE_SLOW_GPU), its reason naming
each figure, how far under the fleet's median, and the GPUs (pairs, HCAs) of the node that are that far under it
themselves. Passing on the re-run, its runs' figures together decide: still beyond, it failed once (WARN); within,
the first run was noise.

Nodes of different GPU models are never compared; a model with fewer than MIN_NODES nodes is not judged against the
fleet (said in its nodes' evidence and verdicts, and in a note), never a pass by comparison. A value that is no
finite figure (NaN, inf, negative, over terms.MAX_FIGURE) is no one's figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Iterable, Mapping, Sequence

from gpuval.baselines.noise import OUTLIER_Z, RELATIVE_FLOOR, NoiseBand, band
from gpuval.results.model import Status
from gpuval.fleet.plan.terms import CENTRE_PURPOSES, NodeFigures, Test, TestResult, is_figure

MIN_NODES = 3  # nodes of one GPU model before their figures judge each other (the median of two is no majority)
NAMED = 8  # the slow GPUs (pairs, HCAs) a reason names; the rest are counted
Key = tuple[str, str]  # (GPU model, figure)


@dataclass(frozen=True)
class Short:
    """One figure of a node beyond its model's band: the figure's name, the node's figure, the band, the unit."""

    name: str
    value: float
    band: NoiseBand
    unit: str

    @property
    def shortfall(self) -> float:
        """How far under the fleet's median, as a share of it."""
        return self.band.shortfall(self.value, True) / self.band.center


@dataclass(frozen=True)
class GpuJudgement:
    """A node test's figures against the fleet's nodes of its GPU model: FAIL (a figure beyond its band), PASS (every
    judged one within), None (none judged: `reason` says why); its words, and what it was judged against."""

    status: Status | None
    reason: str
    against: str = ""


@dataclass
class FleetFigures:
    """What the fleet's node suites measured so far: per (GPU model, figure) each node's figure from its first node
    suite and THE robust band over them (once MIN_NODES nodes have it), each node's GPU model, the nodes of each
    model."""

    values: dict[Key, dict[str, float]] = field(default_factory=dict)
    bands: dict[Key, NoiseBand] = field(default_factory=dict)
    units: dict[Key, str] = field(default_factory=dict)
    model_of: dict[str, str] = field(default_factory=dict)
    nodes_of: dict[str, list[str]] = field(default_factory=dict)

    def update(self, pairs: Iterable[tuple[Test, TestResult]]) -> None:
        """Take one round's node tests in (those that ran and measured figures), then recompute the bands they
        touched."""
        touched: set[Key] = set()
        for test, result in pairs:
            if test.kind != "node" or result.gpus is None or result.error or result.not_run:
                continue
            node, model = test.nodes[0], result.gpus.model
            if node not in self.model_of:
                self.model_of[node] = model
                self.nodes_of.setdefault(model, []).append(node)
            if test.purpose not in CENTRE_PURPOSES:
                continue  # a re-run is judged against the fleet, never part of it
            for name, value in result.gpus.means.items():
                key = (model, name)
                self.values.setdefault(key, {})[node] = value
                self.units[key] = result.gpus.figures[name].unit
                touched.add(key)
        for key in touched:
            figures = list(self.values[key].values())
            found = band(figures) if len(figures) >= MIN_NODES else None
            if found is not None and found.center > 0:
                self.bands[key] = found

    def shortfalls(self, model: str, figures: Mapping[str, float]) -> list[Short] | None:
        """Each of `figures` (name -> the node's figure) beyond its band among the nodes of `model`, worst first
        ([]: none); None when no band judges any of them."""
        judged, short = False, []
        for name, value in figures.items():
            found = self.bands.get((model, name))
            if found is None or not is_figure(value):
                continue
            judged = True
            if found.severity(value, higher_is_better=True):
                short.append(Short(name, value, found, self.units[(model, name)]))
        return sorted(short, key=lambda s: -s.shortfall) if judged else None

    def judge(self, gpus: NodeFigures) -> GpuJudgement:
        """One node test's figures against the fleet's nodes of its GPU model."""
        shorts = self.shortfalls(gpus.model, gpus.means)
        nodes = len(self.nodes_of.get(gpus.model, ()))
        if shorts is None:
            return GpuJudgement(None, self._why_not(gpus.model, nodes))
        against = f"GPU figures: the median of the fleet's {nodes} {gpus.model} nodes"
        if not shorts:
            judged = sum((gpus.model, name) in self.bands for name in gpus.figures)
            return GpuJudgement(Status.PASS, f"GPU figures within the fleet's ({judged} figures against {nodes} "
                                             f"{gpus.model} nodes)", against)
        return GpuJudgement(Status.FAIL, "GPUs slow: " + "; ".join(self._said(s, gpus) for s in shorts), against)

    def together(self, model: str, runs: Sequence[Mapping[str, float]]) -> bool:
        """Whether a node's figures over several node suites (each run's, by name), averaged, are still beyond the
        band of `model`."""
        names = {name for run in runs for name in run}
        mean = {name: fmean([run[name] for run in runs if name in run]) for name in names}
        return bool(self.shortfalls(model, mean))

    def compared(self, node: str, runs: Sequence[Mapping[str, float]]) -> bool:
        """Whether any of `node`'s figures (its node suites', by name) was judged against the fleet."""
        model = self.model_of.get(node)
        return model is not None and any(self.shortfalls(model, run) is not None for run in runs)

    def why_not(self, node: str, runs: Sequence[Mapping[str, float]]) -> str:
        """Why `node`'s GPU figures (its node suites', by name) were not judged against the fleet: "" where they were,
        or where it has none (nothing to say)."""
        model = self.model_of.get(node)
        if model is None or self.compared(node, runs):
            return ""
        return self._why_not(model, len(self.nodes_of[model]))

    def notes(self) -> list[str]:
        """One line per GPU model whose nodes' figures judged nothing: too few nodes of it in the check."""
        return [f"GPU figures of {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({', '.join(nodes[:NAMED])}"
                f"{', ...' if len(nodes) > NAMED else ''}) not judged against the fleet: {_fewer(model, len(nodes))}"
                for model, nodes in self.nodes_of.items() if len(nodes) < MIN_NODES]

    def _why_not(self, model: str, nodes: int) -> str:
        if nodes < MIN_NODES:
            return f"GPU figures not judged against the fleet: {_fewer(model, nodes)}"
        return (f"GPU figures not judged against the fleet: none of them is a figure (finite, not negative) that "
                f"{MIN_NODES} or more of the {nodes} {model} nodes measured")

    def _said(self, short: Short, gpus: NodeFigures) -> str:
        """'gemm_fp16_tflops: 206 TFLOPS, 25.0% under the median 275 TFLOPS of 5 ... nodes (...); slow: GPU 0 ...'."""
        found, unit = short.band, short.unit
        rule = f"{100 * RELATIVE_FLOOR:g}% of it" if found.width <= RELATIVE_FLOOR * found.center * (1 + 1e-9) else \
            f"{OUTLIER_Z:g} robust sigmas of the fleet's nodes, {100 * found.sigma / found.center:.1f}% each"
        values = [(who, v) for who, v in gpus.figures[short.name].values if is_figure(v)]
        slow = [(who, v) for who, v in values if who and found.severity(v, higher_is_better=True)]
        named = ", ".join(f"{who} {v:.4g}" for who, v in slow[:NAMED]) + (
            f" and {len(slow) - NAMED} more" if len(slow) > NAMED else "")
        which = f"; slow: {named} ({len(slow)} of {len(values)})" if slow else \
            "; none of its values alone is beyond it" if any(who for who, _ in values) else ""
        return (f"{short.name} {short.value:.4g} {unit}, {100 * short.shortfall:.1f}% under the median "
                f"{found.center:.4g} {unit} of {found.n} {gpus.model} nodes (slow beyond "
                f"{100 * found.width / found.center:.1f}%: {rule}){which}")


def _fewer(model: str, nodes: int) -> str:
    return (f"{nodes} node{'s' if nodes != 1 else ''} of {model} in the check, and nodes of different GPU models are "
            f"never compared (at least {MIN_NODES} of one model are)")
