"""Which of many nodes, or which link, drags a job down: adaptive rounds of node, pair and group tests.

Pure and engine-agnostic: plan_next(state) gives the next Round (tests on disjoint nodes), the caller runs it on
any engine and gives back TestResults, record(state, round, results) judges them, verdicts(state) concludes.
"""

from gpuval.fleet.causes import Cause, FleetFault
from gpuval.fleet.model import (
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
from gpuval.fleet.planner import plan_next, scale_nodes
from gpuval.fleet.round_judgement import record
from gpuval.fleet.state import FleetState, NodeState, new_fleet
from gpuval.fleet.verdicts import verdicts

__all__ = [
    "BusbwExpectation",
    "Cause",
    "Evidence",
    "Expect",
    "FleetConfig",
    "FleetFault",
    "FleetState",
    "FleetVerdicts",
    "NodeState",
    "Round",
    "Test",
    "TestResult",
    "Verdict",
    "new_fleet",
    "plan_next",
    "record",
    "scale_nodes",
    "verdicts",
]
