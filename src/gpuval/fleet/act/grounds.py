"""What a fleet check keeps of each node it takes out: the grounds of its evidence bundle (operate.evidence's one
writer, called by operate.act: the same `DIR/evidence/NODE/RUN.yaml` a node's `health --drain` writes), here in the
checking process's state directory, since the check judged the node from here. The bundle's `evidence.fleet` part says what convicted the node: the verdict's
cause and reason, its fault codes, the tests the verdict rests on (kind, nodes, samples, figures against what they
were judged against, each test's error, cut to MAX_ERROR characters, at most MAX_TESTS tests), and the settings those
tests ran with: what `gpuval fleet retest` repeats before it lifts the drain (fleet/act/retests.py). The failing health
records of the node's own node tests are its records.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpuval.fleet.run.job import JobSettings
from gpuval.fleet.plan.terms import FleetConfig, Verdict
from gpuval.fleet.run.records import evidence_json
from gpuval.operate.evidence import Grounds
from gpuval.results.model import Result

MAX_TESTS = 24  # a node is convicted on two or three tests; a long history is cut to its last tests
MAX_ERROR = 2000  # characters of one test's error (its NCCL or gloo lines): the bundle stays bounded
_SETTINGS = ("iters", "warmup", "backend", "timeout_s", "gpus_per_node", "procs_per_node", "node_procs", "sku",
             "baselines", "image")  # what a re-test repeats (never env: it may hold a password)


def settings_json(settings: JobSettings, config: FleetConfig) -> dict[str, Any]:
    """The settings a check's tests ran with, as a bundle keeps them (sizes in bytes, samples per kind and the most
    a test may be given, the cut)."""
    kept = {name: getattr(settings, name) for name in _SETTINGS}
    return {**kept, "baselines": list(settings.baselines), "sizes": asdict(settings.sizes),
            "samples": [config.suite_samples, config.screen_samples, config.retest_samples],
            "max_samples": config.max_samples, "cut": config.cut}


@dataclass(frozen=True)
class FailedNode:
    """What the check knows of a node it failed, beyond its verdict: its tests' errors and its failing health
    records (collected while the rounds ran)."""

    verdict: Verdict
    codes: list[str]
    errors: dict[str, str]
    records: list[Result]

    def fleet_json(self, settings: dict[str, Any]) -> dict[str, Any]:
        tests = [{**evidence_json(e), "samples": e.test.samples, "error": self.errors.get(e.test.id, "")[:MAX_ERROR]}
                 for e in self.verdict.evidence[-MAX_TESTS:]]
        return {"cause": self.verdict.cause.value, "reason": self.verdict.reason, "codes": self.codes,
                "tests": tests, "settings": settings}

    def grounds(self, settings: dict[str, Any], description: str) -> Grounds:
        """What the node's evidence bundle keeps (operate.evidence): the tests its verdict rests on (by id), its
        failing health records, and the fleet part (`fleet_json`); no machine: the check judged it from elsewhere."""
        tests = [e.test.id for e in self.verdict.evidence[-MAX_TESTS:]]
        return Grounds(description, tests, self.records, self.fleet_json(settings))
