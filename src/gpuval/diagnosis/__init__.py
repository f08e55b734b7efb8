"""Which node is bad, and why: each node against its SKU's baseline, its own history and its peers of the run."""

from gpuval.diagnosis.expectations import Expectation, ExpectationSource, no_expectations
from gpuval.diagnosis.judge import Diagnosis, Finding, NodeVerdict, diagnose

__all__ = ["Diagnosis", "Expectation", "ExpectationSource", "Finding", "NodeVerdict", "diagnose", "no_expectations"]
