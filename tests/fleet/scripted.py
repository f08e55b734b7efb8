"""A scripted fleet for the planner's rule tests: results from a truth function, with small fixed jitter.

Each sample is nominal x factor x (1 + jitter), the jitter cycling through -1%, -0.5%, 0, +0.5%, +1%, so the
noise the planner measures is about 0.7% and every run is the same (no randomness to make a rule test flaky).
"""

from __future__ import annotations

from typing import Callable

from gpuval.results.model import Status
from gpuval.fleet.plan import (
    BusbwExpectation, Expect, FleetConfig, FleetKnowledge, Round, TestResult, new_fleet, plan_next, take_round,
)

NOMINAL = {"all_reduce": 100.0, "sendrecv": 40.0}
JITTER = (-0.01, -0.005, 0.0, 0.005, 0.01)

# (kind, nodes) -> a factor of nominal, an error string (the test crashed), or None (could not run)
Truth = Callable[[str, tuple[str, ...]], "float | str | None"]


def sku(coll: str, n: int) -> BusbwExpectation:
    """Nominal at every node count, failing 10% under."""
    value = 200.0 if n == 1 else NOMINAL[coll]
    return BusbwExpectation.limits(value, 0.9 * value, source="test SKU")


def results(rnd: Round, truth: Truth) -> list[TestResult]:
    """What the scripted fleet answers to one round."""
    out = []
    for t in rnd.tests:
        v = truth(t.kind, t.nodes)
        if v is None:
            out.append(TestResult(t.id, not_run="engine refused"))
        elif isinstance(v, str):
            out.append(TestResult(t.id, error=v))
        else:
            base = {"all_reduce": 200.0} if t.kind == "node" else {c: NOMINAL[c] for c in t.collectives}
            samples = {c: tuple(b * v * (1 + JITTER[k % 5]) for k in range(t.samples)) for c, b in base.items()}
            out.append(TestResult(t.id, samples, health=Status.PASS if t.kind == "node" else None))
    return out


def run(nodes: list[str], truth: Truth, groups: dict[str, str] | None = None, expect: Expect | None = sku,
        config: FleetConfig | None = None) -> FleetKnowledge:
    """Plan and record rounds until the planner stops."""
    state = new_fleet(nodes, config, expect, groups)
    while (rnd := plan_next(state)) is not None:
        take_round(state, rnd, results(rnd, truth))
    return state


def healthy(kind: str, nodes: tuple[str, ...]) -> float:
    """Every test at nominal."""
    return 1.0


def run_stored(nodes: list[str], truth: Truth, seed: int, run_id: str = "run-1") -> tuple[FleetKnowledge, list]:
    """`run`, and every test's measurement as the check stores it (records.measurement_records, one per node)."""
    from gpuval.fleet.run.records import Origin, measurement_records
    from gpuval.fleet.run.driver import round_evidence

    state = new_fleet(nodes, FleetConfig(seed=seed), sku)
    stored: list = []
    while (rnd := plan_next(state)) is not None:
        answers = results(rnd, truth)
        take_round(state, rnd, answers)
        evidence = round_evidence(state, rnd)
        for test, result in zip(rnd.tests, answers):
            stored += measurement_records(test, result, evidence.get(test.id),
                                          origin=Origin(run_id=run_id, engine="slurm"), size=1 << 30)
    return state, stored
