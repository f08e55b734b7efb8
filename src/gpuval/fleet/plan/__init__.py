"""The fleet's pure planner and judge: no engine, no operate, no results I/O, nothing of fleet.run or fleet.act
(tests/test_layers.py holds it). plan_next(knowledge) gives the next Round (tests on disjoint nodes), the caller runs
it on any engine and gives back TestResults, take_round(knowledge, round, results) weighs them, verdicts(knowledge)
concludes.
"""

from gpuval.fleet.plan.causes import Cause
from gpuval.fleet.plan.knowledge import FleetKnowledge, NodeStage, new_fleet
from gpuval.fleet.plan.planner import plan_next, scale_nodes
from gpuval.fleet.plan.rounds import take_round
from gpuval.fleet.plan.terms import (
    BusbwExpectation,
    Evidence,
    Expect,
    FleetConfig,
    FleetVerdicts,
    Round,
    Test,
    TestResult,
    Verdict,
)
from gpuval.fleet.plan.verdicts import verdicts

__all__ = [
    "BusbwExpectation",
    "Cause",
    "Evidence",
    "Expect",
    "FleetConfig",
    "FleetKnowledge",
    "FleetVerdicts",
    "NodeStage",
    "Round",
    "Test",
    "TestResult",
    "Verdict",
    "new_fleet",
    "plan_next",
    "scale_nodes",
    "take_round",
    "verdicts",
]
